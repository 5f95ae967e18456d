"""chiplet_fa as a transformers attention backend (chiplet_fa.integrations.transformers).

Small random-weight models built from configs (no downloads): Llama (GQA), Mistral (sliding
window) and Gemma 2 (attention-logit softcap, alternating sliding-window layers). With
attn_implementation="chiplet_fa" they must give eager's logits and parameter gradients on padded
(left and right) and packed batches under flash-attention's 2x rule: the error against eager run in
float64 at most twice eager's own float32 error, plus a small floor. Skipped without transformers.
"""
import contextlib
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from chiplet_fa.integrations import transformers as cfa_hf  # noqa: E402
from devices import DEVICES  # noqa: E402
from reference import assert_close_to_ref  # noqa: E402

NAME = cfa_hf.register()
LENGTHS = [24, 17, 9]  # sequences of a batch: longer than the test sliding window, none a multiple of it
WINDOW = 5
# Larger weights than the default 0.02, so that attention is far from uniform and masks, windows and
# softcaps change the logits well beyond the tolerances.
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, initializer_range=0.15,
             attention_dropout=0.0)


def config(name, **overrides):
    if name == "llama":
        cfg = transformers.LlamaConfig(**SMALL)
    elif name == "mistral":
        cfg = transformers.MistralConfig(**SMALL, sliding_window=WINDOW)
    elif name == "gemma2":
        cfg = transformers.Gemma2Config(**SMALL, sliding_window=WINDOW, attn_logit_softcapping=1.0,
                                        final_logit_softcapping=None, query_pre_attn_scalar=16)
    else:
        raise KeyError(name)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def build(name, impl, reference=None, dtype=torch.float32, device="cpu", **overrides):
    """A model with attn_implementation=impl; weights from `reference` when given (from_config does not
    copy its config, so each model gets its own)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(name, **overrides), attn_implementation=impl)
    if reference is not None:
        model.load_state_dict(reference.state_dict())
    return model.to(device, dtype).eval()


def batch(layout, lengths=LENGTHS, seed=1):
    """Model inputs and the boolean mask of real tokens, for right or left padding or one packed row
    (position_ids restarting per sequence; "packed_kwargs" adds cu_seq_lens_*/max_length_* as
    DataCollatorWithFlattening(return_flash_attn_kwargs=True) does)."""
    gen = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    if layout in ("right", "left"):
        ids = torch.randint(0, SMALL["vocab_size"], (len(lengths), longest), generator=gen)
        cols = torch.arange(longest)
        lens = torch.tensor(lengths)[:, None]
        mask = cols < lens if layout == "right" else cols >= longest - lens
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)  # what generate() passes
        return dict(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids), mask
    ids = torch.randint(0, SMALL["vocab_size"], (1, sum(lengths)), generator=gen)
    # use_cache=False as in training: with a cache, transformers' masks ignore packing (eager would
    # let the sequences see each other)
    inputs = dict(input_ids=ids, position_ids=torch.cat([torch.arange(n) for n in lengths])[None], use_cache=False)
    if layout == "packed_kwargs":
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
        inputs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
    return inputs, torch.ones_like(ids, dtype=torch.bool)


@contextlib.contextmanager
def float64_softmax():
    """Eager as the float64 reference: transformers' eager attention computes its softmax in float32
    (softmax(..., dtype=torch.float32)), an upcast for half precision but for a float64 model a
    downcast, which would cap the reference at float32 accuracy (and turns the fully masked rows of
    left padding into NaN, since float64's mask minimum becomes -inf in float32). Keep float64 there."""
    softmax = torch.nn.functional.softmax

    def keep_float64(input, *args, dtype=None, **kwargs):
        return softmax(input, *args, dtype=None if input.dtype == torch.float64 else dtype, **kwargs)

    torch.nn.functional.softmax = keep_float64
    try:
        yield
    finally:
        torch.nn.functional.softmax = softmax


def logits_and_grads(model, inputs, mask):
    """Logits of the real tokens and every parameter's gradient of a fixed random functional of them
    (on the CPU, whichever device the model is on)."""
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
    with float64_softmax() if next(model.parameters()).dtype == torch.float64 else contextlib.nullcontext():
        logits = model(**inputs).logits[mask.to(device)]
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (logits * weights.to(logits)).sum().backward()
    return logits.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}


def assert_grads_two_x(got, ref, low, floor):
    assert got.keys() == ref.keys() == low.keys()
    for name in ref:
        r = ref[name].double()
        err = (got[name].double() - r).abs().max().item()
        budget = (low[name].double() - r).abs().max().item()
        bound = 2 * budget + floor * max(1.0, r.abs().max().item())
        assert err <= bound, f"grad of {name}: error {err:.3g} > 2 x {budget:.3g} + floor"


MODELS = ["llama", "mistral", "gemma2"]
LAYOUTS = ["right", "left", "packed", "packed_kwargs"]


@pytest.fixture(scope="module")
def references():
    """Per model: the eager float64 reference (weights shared by every other run)."""
    return {name: build(name, "eager", dtype=torch.float64) for name in MODELS}


# float32 on the CPU, bfloat16 on a GPU (its kernels' dtypes); floors: absolute for the logits (of order 1),
# relative to the largest value for each gradient
FLOOR = {"cpu": (torch.float32, 1e-5), "cuda": (torch.bfloat16, 1.6e-2)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", MODELS)
def test_logits_and_gradients_match_eager_under_the_2x_rule(references, name, layout, device):
    dtype, floor = FLOOR[device]
    inputs, mask = batch(layout)
    ref = references[name]
    ref_logits, ref_grads = logits_and_grads(ref, inputs, mask)
    eager_logits, eager_grads = logits_and_grads(build(name, "eager", ref, dtype, device), inputs, mask)
    model = build(name, NAME, ref, dtype, device)
    assert model.config._attn_implementation == NAME
    logits, grads = logits_and_grads(model, inputs, mask)
    assert_close_to_ref(logits, ref_logits, eager_logits, floor, "logits")
    assert_grads_two_x(grads, ref_grads, eager_grads, floor)


def test_unpadded_batch_takes_the_dense_path_and_matches_eager(references):
    inputs = dict(input_ids=torch.randint(0, 128, (2, 21), generator=torch.Generator().manual_seed(3)))
    mask = torch.ones(2, 21, dtype=torch.bool)
    ref_logits, ref_grads = logits_and_grads(references["mistral"], inputs, mask)
    eager = logits_and_grads(build("mistral", "eager", references["mistral"]), inputs, mask)
    got = logits_and_grads(build("mistral", NAME, references["mistral"]), inputs, mask)
    assert_close_to_ref(got[0], ref_logits, eager[0], 1e-5, "logits")
    assert_grads_two_x(got[1], ref_grads, eager[1], 1e-5)


@pytest.mark.parametrize("name, change", [("mistral", dict(sliding_window=None)),
                                          ("gemma2", dict(attn_logit_softcapping=None)),
                                          ("gemma2", dict(sliding_window=64))])
def test_the_window_and_softcap_matter_at_these_sizes(references, name, change):
    """Guards the comparisons above: without the window (or softcap) the logits move far beyond the
    tolerance, so a backend that dropped them would fail."""
    inputs, mask = batch("right")
    with torch.no_grad(), float64_softmax():
        want = references[name](**inputs).logits[mask]
        without = build(name, "eager", references[name], dtype=torch.float64, **change)(**inputs).logits[mask]
    assert (want - without).abs().max() > 1e-2


@pytest.mark.parametrize("name, cache", [("gemma2", "dynamic"), ("llama", "static")])
def test_padded_generation_matches_eager(references, name, cache):
    """Left-padded greedy decoding: prefill through the padded path, then one-token steps against the
    cache (the query_length == 1 unpadding; a static cache longer than the mask)."""
    inputs, _ = batch("left", lengths=[11, 6, 8])
    inputs.pop("position_ids")
    runs = {}
    for impl in ("eager", NAME):
        model = build(name, impl, references[name], dtype=torch.float64)
        with torch.no_grad(), float64_softmax():
            runs[impl] = model.generate(**inputs, max_new_tokens=5, do_sample=False, output_scores=True,
                                        return_dict_in_generate=True, pad_token_id=0, cache_implementation=cache)
    assert torch.equal(runs[NAME].sequences, runs["eager"].sequences)
    for got, want in zip(runs[NAME].scores, runs["eager"].scores):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_decoding_steps_read_the_cache_through_flash_attn_with_kvcache(references, cache, monkeypatch):
    """After the prefill, every one-token step of a left-padded batch goes to the decoding kernels
    (static cache: the mask's run of ones ends before the cache does) and generates eager's tokens."""
    calls = []
    original = cfa_hf.flash_attn_with_kvcache

    def counted(q, k_cache, v_cache, **kw):
        calls.append((q.shape[1], kw["cache_seqlens"].tolist(), kw["cache_leftpad"]))
        return original(q, k_cache, v_cache, **kw)

    monkeypatch.setattr(cfa_hf, "flash_attn_with_kvcache", counted)
    inputs, _ = batch("left", lengths=[11, 6, 8])
    inputs.pop("position_ids")
    runs = {}
    for impl in ("eager", NAME):
        model = build("llama", impl, references["llama"], dtype=torch.float64)
        with torch.no_grad(), float64_softmax():
            runs[impl] = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=0,
                                        cache_implementation=cache)
    assert torch.equal(runs[NAME], runs["eager"])
    steps = [c for c in calls if c[0] == 1]  # a static cache's prefill (11 tokens, longer keys) may come too
    assert len(steps) == 3 * 2  # tokens 2..4 (the first comes from the prefill), two layers
    assert steps[0][1] == [12, 12, 12] and steps[0][2].tolist() == [0, 5, 3]


def test_register_is_idempotent_and_fills_both_interfaces():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    assert cfa_hf.register() == cfa_hf.register() == "chiplet_fa"
    assert AttentionInterface._global_mapping["chiplet_fa"] is cfa_hf.attention_forward
    assert ALL_MASK_ATTENTION_FUNCTIONS["chiplet_fa"] is ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"]


def test_names_transformers_reserves_for_flash_attention_are_refused():
    with pytest.raises(ValueError, match="reserves names containing 'flash'"):
        cfa_hf.register("chiplet_flash")


def test_missing_transformers_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'chiplet_fa\[transformers\]'"):
        cfa_hf.register()


class _Module(torch.nn.Module):
    def __init__(self, is_causal=True):
        super().__init__()
        self.is_causal = is_causal
        self.config = transformers.PretrainedConfig()
        self.proj = torch.nn.Linear(2, 2)


def _qkv(batch, length, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 4, length, 8, generator=gen), torch.randn(batch, 2, length, 8, generator=gen),
            torch.randn(batch, 2, length, 8, generator=gen))


def test_cu_seq_lens_kwargs_alone_select_the_packed_path():
    q, k, v = _qkv(1, 30)
    cu = torch.tensor([0, 12, 30], dtype=torch.int64)  # int64 as FlashAttentionKwargs allows
    out, weights = cfa_hf.attention_forward(_Module(), q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                                            max_length_q=torch.tensor(18), max_length_k=18, sliding_window=4)
    assert weights is None and out.shape == (1, 30, 4, 8)
    for lo, hi in ((0, 12), (12, 30)):
        want, _ = cfa_hf.attention_forward(_Module(), q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], None,
                                           sliding_window=4)
        assert torch.equal(out[:, lo:hi], want)


def test_bidirectional_modules_and_explicit_is_causal_are_respected():
    q, k, v = _qkv(1, 10)
    full, _ = cfa_hf.attention_forward(_Module(is_causal=False), q, k, v, None)
    causal, _ = cfa_hf.attention_forward(_Module(is_causal=False), q, k, v, None, is_causal=True)
    assert not torch.allclose(full, causal)
    assert torch.equal(causal, cfa_hf.attention_forward(_Module(), q, k, v, None)[0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(dropout=0.1), "attention dropout is not supported"),
    (dict(s_aux=torch.zeros(4)), "s_aux"),
    (dict(attention_mask=torch.zeros(1, 1, 10, 10)), "4-D attention_mask"),
])
def test_unsupported_features_raise(kwargs, match):
    q, k, v = _qkv(1, 10)
    kwargs.setdefault("attention_mask", None)
    with pytest.raises(ValueError, match=match):
        cfa_hf.attention_forward(_Module(), q, k, v, **kwargs)


def test_training_with_attention_dropout_raises_naming_the_config_field(references):
    model = build("llama", NAME, references["llama"], attention_dropout=0.1).train()
    with pytest.raises(ValueError, match="attention_dropout"):
        model(input_ids=torch.zeros(1, 4, dtype=torch.long))


def test_deterministic_reaches_the_kernel_call(references, monkeypatch):
    """The model's `deterministic` keyword (or FLASH_ATTENTION_DETERMINISTIC=1, as for flash-attention)
    selects the backward without atomics."""
    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["deterministic"])
        return flash_varlen(*args, **kwargs)

    flash_varlen = cfa_hf.flash_attn_varlen_func
    monkeypatch.setattr(cfa_hf, "flash_attn_varlen_func", spy)
    inputs, mask = batch("right")
    model = build("llama", NAME, references["llama"])
    logits_and_grads(model, dict(inputs, deterministic=True), mask)
    monkeypatch.setenv("FLASH_ATTENTION_DETERMINISTIC", "1")
    logits_and_grads(model, inputs, mask)
    monkeypatch.delenv("FLASH_ATTENTION_DETERMINISTIC")
    logits_and_grads(model, inputs, mask)
    layers = SMALL["num_hidden_layers"]
    assert seen == [True] * (2 * layers) + [False] * layers
