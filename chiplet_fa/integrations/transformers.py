"""chiplet_fa as a Hugging Face transformers attention backend.

    import chiplet_fa.integrations.transformers as cfa_hf
    cfa_hf.register()                                   # once per process; idempotent
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="chiplet_fa")

`register()` adds "chiplet_fa" to transformers' AttentionInterface (the function below) and
AttentionMaskInterface (the mask transformers builds for its flash-attention backends: None, or the
2-D padding mask). The function mirrors transformers' flash-attention path
(modeling_flash_attention_utils._flash_attention_forward) on chiplet_fa's flash-attention API:

  * a padding mask: queries and keys are unpadded into a packed batch (flash_attn_varlen_func) and
    the output padded back with zeros (left or right padding; one-token decoding; a key cache
    longer than the mask is cut to it, as transformers does);
  * no mask, and packed sequences, given either as cu_seq_lens_q/k with max_length_q/k keyword
    arguments (DataCollatorWithFlattening(return_flash_attn_kwargs=True)) or as position_ids that
    restart within a batch of one row: one packed varlen call;
  * decoding (at most 16 new tokens against a longer key cache, no gradient): flash_attn_with_kvcache
    reads transformers' cache in place, each row's keys being the mask's run of ones (left padding
    before it, a static cache's unfilled tail after it); a mask with holes takes the unpadded path;
  * otherwise one dense call (flash_attn_func; bottom-right causal alignment, so decoding against a
    cache works without a mask).
The module's scaling, is_causal, sliding_window (flash-attention window (w - 1, w - 1), applied when
the keys outnumber it) and softcap (e.g. Gemma 2's attn_logit_softcapping) are passed through; so is
`deterministic` (or FLASH_ATTENTION_DETERMINISTIC=1), which makes the backward run without atomics.
What chiplet_fa cannot do raises ValueError: attention dropout in training (set the config's
attention_dropout to 0), attention sinks (s_aux), and 4-D masks built outside the mask interface;
output_attentions gives None with a warning, as on transformers' flash path. Since the name has no
"flash" in it, code in transformers that checks for flash-attention by name (vision encoders that
pass cu_seqlens, Llama 4's chunked masks, paged "paged|..." continuous batching) does not treat it as
one; the text models' prefill, decoding and training paths above do not depend on that.

transformers is an optional dependency and is imported only here.
"""
import os
import warnings

import torch

from ..flash_api import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

NAME = "chiplet_fa"


def register(name: str = NAME) -> str:
    """Registers chiplet_fa with transformers under `name` (default "chiplet_fa") as an attention
    function and a mask function; calling it again changes nothing. Returns the name.

    The name must not contain "flash": transformers takes such names for its own flash-attention
    packages and hub kernels and would try to load one."""
    if "flash" in name:
        raise ValueError(f"chiplet_fa: register(name={name!r}): transformers reserves names containing 'flash' "
                         "for its flash-attention packages and hub kernels; choose another name")
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ImportError("chiplet_fa.integrations.transformers needs transformers: "
                          "pip install 'chiplet_fa[transformers]'") from exc
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    # The mask transformers builds for flash-attention: None or the boolean (batch, keys) padding mask.
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
    return name


def _target_dtype(query, module):
    """The dtype transformers' flash path casts float32 activations to (PEFT's float32 layer norms):
    autocast's, else a quantized model's, else that of the model's Linear weights (float32 for a
    float32 model, which chiplet_fa computes as it is)."""
    if query.dtype != torch.float32:
        return None
    if torch.is_autocast_enabled(query.device.type):
        return torch.get_autocast_dtype(query.device.type)
    if hasattr(module.config, "_is_quantized"):
        return module.config.dtype
    return next(layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)).weight.dtype


def _unpad_data(mask):
    """(indices of kept tokens, int32 cu_seqlens, longest length) of a boolean (batch, length) mask."""
    lengths = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, int(lengths.max().item()) if lengths.numel() else 0


def _first_axis(t, indices):
    return t.reshape(-1, *t.shape[2:])[indices]


def _unpad(query, key, value, mask):
    """Packed q/k/v and their cu_seqlens, max lengths and the query rows they came from, as
    transformers' _upad_input builds them (the query mask is the last N_q columns: left padding)."""
    batch, query_length = query.shape[:2]
    indices_k, cu_k, max_k = _unpad_data(mask)
    if key.shape[1] > mask.shape[-1]:  # a static cache longer than the mask: its tail is garbage
        key, value = key[:, :mask.shape[-1]], value[:, :mask.shape[-1]]
    key, value = _first_axis(key, indices_k), _first_axis(value, indices_k)
    if query_length == mask.shape[-1]:
        indices_q, cu_q, max_q = indices_k, cu_k, max_k
    elif query_length == 1:
        cu_q = torch.arange(batch + 1, dtype=torch.int32, device=query.device)
        indices_q, max_q = torch.arange(batch, device=query.device), 1
    else:
        indices_q, cu_q, max_q = _unpad_data(mask[:, -query_length:])
    return _first_axis(query, indices_q), key, value, indices_q, (cu_q, cu_k), (max_q, max_k)


def _packed_from_position_ids(position_ids, batch):
    """cu_seqlens (int32) and the longest sequence when position_ids (1, N) restart within the row
    (transformers' rule: a sequence starts wherever the position equals the row's minimum)."""
    if position_ids is None or batch != 1:
        return None
    position_ids = position_ids.reshape(-1)
    start = position_ids.min()
    if torch.equal(position_ids, torch.arange(position_ids.numel(), device=position_ids.device) + start):
        return None
    starts = (position_ids == start).nonzero().flatten().to(torch.int32)
    cu = torch.cat([starts, torch.tensor([position_ids.numel()], dtype=torch.int32, device=starts.device)])
    return cu, int(cu.diff().max().item())


# Decoding steps (and speculative ones) have a few new tokens; a longer query is a prefill.
_DECODE_TOKENS = 16


def _decoding(query, key, value, mask):
    """(cache_seqlens, cache_leftpad) when the step decodes through flash_attn_with_kvcache ((None,
    None): the whole cache): a few tokens, no gradient, a cache the GPU kernels can read in place
    (head dim a multiple of 8, 16-byte aligned), and a mask (if any) that is one run of ones per
    row; else None."""
    n_q, n_k = query.shape[1], key.shape[1]
    if n_q > _DECODE_TOKENS or n_k <= n_q or (torch.is_grad_enabled() and query.requires_grad):
        return None
    if query.is_cuda and (query.shape[-1] % 8 or key.data_ptr() % 16 or value.data_ptr() % 16):
        return None
    if mask is None:  # every key: the whole cache
        return None, None
    mask = mask[:, :n_k].bool()
    ones = mask.sum(-1)
    first = mask.int().argmax(-1)
    columns = torch.arange(mask.shape[-1], device=mask.device)
    run = (columns >= first[:, None]) & (columns < (first + ones)[:, None])
    if not torch.equal(run, mask):
        return None
    return (first + ones).int(), first.int()


def _int(n):
    return int(n.item()) if torch.is_tensor(n) else int(n)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask, dropout: float = 0.0, scaling=None, sliding_window=None, softcap=None,
                      is_causal=None, s_aux=None, **kwargs):
    """transformers attention function: query (B, H_q, N_q, D), key/value (B, H_kv, N_k, D), the mask
    from the flash mask function; returns ((B, N_q, H_q, D), None)."""
    if dropout:
        raise ValueError(f"chiplet_fa (transformers backend): attention dropout is not supported, got dropout="
                         f"{dropout}; set the config's attention_dropout to 0.0 or use eval mode")
    if s_aux is not None:
        raise ValueError("chiplet_fa (transformers backend): attention sinks (s_aux) are not supported")
    if kwargs.get("output_attentions", False):
        warnings.warn("chiplet_fa (transformers backend) forms no attention weights: output_attentions "
                      "gives None; use attn_implementation='eager' for them", stacklevel=2)
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError("chiplet_fa (transformers backend): expects no mask or a 2-D padding mask from the "
                         f"flash mask function, got a {attention_mask.dim()}-D attention_mask; this model builds "
                         "its own mask, which chiplet_fa does not support")
    batch, query_length = query.shape[0], query.shape[2]
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    head_dim, v_head_dim = query.shape[-1], value.shape[-1]
    if v_head_dim != head_dim:  # e.g. MLA: pad V to the query head dim, crop the output below
        value = torch.nn.functional.pad(value, [0, head_dim - v_head_dim])
    target = _target_dtype(query, module)
    if target is not None and target != query.dtype:
        query, key, value = query.to(target), key.to(target), value.to(target)

    deterministic = kwargs.get("deterministic")
    if deterministic is None:
        deterministic = os.getenv("FLASH_ATTENTION_DETERMINISTIC", "0") == "1"
    options = dict(softmax_scale=scaling, causal=module.is_causal if is_causal is None else bool(is_causal),
                   softcap=softcap or 0.0, deterministic=deterministic)
    if sliding_window is not None and key.shape[1] > sliding_window:
        options["window_size"] = (sliding_window - 1, sliding_window - 1)

    decoding = _decoding(query, key, value, attention_mask)
    if decoding is not None:
        cache_seqlens, cache_leftpad = decoding
        options.pop("deterministic")
        out = flash_attn_with_kvcache(query, key, value, cache_seqlens=cache_seqlens, cache_leftpad=cache_leftpad,
                                      **options)
        return (out[..., :v_head_dim] if v_head_dim != head_dim else out), None
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    have_varlen_kwargs = all(x is not None for x in (cu_q, cu_k, max_q, max_k))
    if attention_mask is not None:
        q, k, v, indices_q, (cu_q, cu_k), (max_q, max_k) = _unpad(query, key, value, attention_mask)
        out_packed = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **options)
        out = out_packed.new_zeros((batch * query_length,) + out_packed.shape[1:])
        out = out.index_copy(0, indices_q, out_packed).view(batch, query_length, *out_packed.shape[1:])
    else:
        packed = None if have_varlen_kwargs else _packed_from_position_ids(kwargs.get("position_ids"), batch)
        if have_varlen_kwargs or packed is not None:
            if packed is not None:
                cu_q, max_q = packed
                cu_k, max_k = packed
            flat = [t.reshape(-1, *t.shape[2:]) for t in (query, key, value)]
            out = flash_attn_varlen_func(*flat, cu_q.to(torch.int32), cu_k.to(torch.int32), _int(max_q),
                                         _int(max_k), **options)
            out = out.view(batch, -1, *out.shape[1:])
        else:
            out = flash_attn_func(query, key, value, **options)
    if v_head_dim != head_dim:
        out = out[..., :v_head_dim]
    return out, None
