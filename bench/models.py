"""transformers models end to end with attn_implementation="chiplet_fa" against "sdpa", one process.

  python bench/models.py --out bench/results            # H200: 2-layer Llama-, Mistral- and Gemma 2-shaped
                                                        # models, bf16, 16K tokens per batch (~3-5 min)
  python bench/models.py --tiny --out /tmp/r            # CPU smoke test: tiny models in float32
Models (random weights from configs, no downloads): Llama (GQA 32/8, D=128), Mistral (the same with
a 4096-token sliding window), Gemma 2 (Gemma-2-9B's attention: GQA 16/8, D=256, hidden 3584,
attention-logit softcap 50, final softcap 30, alternating sliding-window layers).
Batches of --seqlen tokens: one sequence; a right-padded pair (lengths N and N/2 + 123); four packed
sequences in one row (restarting position_ids, as DataCollatorWithFlattening gives). Tasks: prefill
(the logits, no grad) and train (forward and backward of the causal-LM loss); and generate: greedy
decoding of --new-tokens tokens after a left-padded prompt of --prompt tokens (static cache) at
batch 1, 8 and 64, in tokens per second, with the share of generated tokens equal to SDPA's.

Accuracy, flash-attention's 2x rule end to end: the reference is transformers' eager attention
computed in float32 (float64 with --tiny) on the same weights, and the yardstick that same eager
math in the model's dtype; both run in query chunks recomputed in the backward (so 16K tokens fit)
and both take every mask, window and softcap the model asks for. Errors are max |x - ref| / max |ref|
over the logits (prefill) or the worst parameter gradient (train); "2x" says whether chiplet_fa's is
within twice eager's (+ a floor). SDPA's errors are listed too, and "SDPA spread" is the largest
difference between two SDPA backends on the same input (flash, cuDNN, efficient, whichever run it).
transformers' SDPA path ignores Gemma 2's attention softcap (5.17; later versions refuse SDPA for
Gemma 2, and its columns are then n/a): its Gemma 2 errors include that. Time: median ms per step.
"sdpa_chiplet_fa" is the model's SDPA path (flash backend) with chiplet_fa activated as torch's
flash-attention implementation (chiplet_fa.integrations.torch).
Writes models_<gpu>.json and generates models.md again (a section per models JSON in --out).
"""
import argparse
import contextlib
import copy
import sys
from pathlib import Path

import torch
import torch.utils.checkpoint
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import PEERS, time_ms  # noqa: E402

import transformers  # noqa: E402
import transformers.masking_utils  # noqa: E402

import chiplet_fa.integrations.torch as cfa_torch  # noqa: E402
import chiplet_fa.integrations.transformers as cfa_hf  # noqa: E402

CHIPLET = cfa_hf.register()
EAGER = "eager_chunked"
# SDPA's flash backend with chiplet_fa installed behind it (torch's flash-attention registry).
SDPA_CHIPLET = "sdpa_chiplet_fa"
# Implementations compared (all) and timed (all but eager): name -> (attn_implementation, SDPA backend).
IMPLS = {CHIPLET: (CHIPLET, None), EAGER: (EAGER, None), **{peer: ("sdpa", backend) for peer, backend in PEERS.items()},
         SDPA_CHIPLET: ("sdpa", PEERS["sdpa_flash"])}
BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
TIMED = [i for i in IMPLS if i != EAGER]
CHUNK = 1024  # query rows per chunk of the eager reference


def eager_chunked(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
    """transformers' eager attention (scaled scores, softcap, the additive eager mask, softmax in
    float32 for half precision, probabilities in the input dtype, times V) in chunks of query rows,
    each recomputed in the backward: the reference and the yardstick at 16K tokens. Unlike eager, a
    float64 model keeps its softmax in float64."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scaling = module.head_dim ** -0.5 if scaling is None else scaling
    softmax_dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype

    def rows(q, k, v, mask):
        scores = torch.matmul(q, k.transpose(2, 3)) * scaling
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if mask is not None:
            scores = scores + mask
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=softmax_dtype).to(q.dtype), v)

    outs = []
    for i in range(0, query.shape[2], CHUNK):
        args = (query[:, :, i:i + CHUNK], key, value,
                None if attention_mask is None else attention_mask[:, :, i:i + CHUNK])
        outs.append(torch.utils.checkpoint.checkpoint(rows, *args, use_reentrant=False)
                    if torch.is_grad_enabled() else rows(*args))
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


transformers.AttentionInterface.register(EAGER, eager_chunked)
transformers.masking_utils.AttentionMaskInterface.register(
    EAGER, transformers.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["eager"])
MODELS = ("llama", "mistral", "gemma2")
BATCHES = ("single", "padded", "packed")
TASKS = ("prefill", "train", "generate")
GENERATE_BATCHES = (1, 8, 64)


def configs(tiny, layers):
    if tiny:
        base = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16)
        window = 16
    else:  # Llama-3-8B / Mistral-7B attention shapes, fewer layers, a 32K vocabulary
        base = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=128)
        window = 4096
    base.update(num_hidden_layers=layers, max_position_embeddings=1 << 17, attention_dropout=0.0)
    gemma = base if tiny else dict(base, hidden_size=3584, num_attention_heads=16, head_dim=256)
    return {
        "llama": transformers.LlamaConfig(**base),
        "mistral": transformers.MistralConfig(**base, sliding_window=window),
        "gemma2": transformers.Gemma2Config(**gemma, sliding_window=window, attn_logit_softcapping=50.0,
                                            final_logit_softcapping=30.0, query_pre_attn_scalar=gemma["head_dim"]),
    }


def make_batch(kind, n, vocab, device):
    """Inputs (with labels; -100 on padding) and the mask of real tokens."""
    gen = torch.Generator().manual_seed(0)
    if kind == "padded":
        lengths = torch.tensor([n, n // 2 + 123 if n > 512 else n * 3 // 4])
        ids = torch.randint(0, vocab, (2, n), generator=gen)
        mask = torch.arange(n)[None] < lengths[:, None]
        inputs = dict(input_ids=ids, attention_mask=mask.long(), labels=ids.masked_fill(~mask, -100))
    else:
        ids = torch.randint(0, vocab, (1, n), generator=gen)
        mask = torch.ones_like(ids, dtype=torch.bool)
        inputs = dict(input_ids=ids, labels=ids.clone())
        if kind == "packed":  # four sequences of uneven lengths
            cuts = [0, n * 3 // 10, n // 2, n * 7 // 8, n]
            inputs["position_ids"] = torch.cat([torch.arange(b - a) for a, b in zip(cuts, cuts[1:])])[None]
    inputs["use_cache"] = False
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}, mask.to(device)


def run(model, impl, task, inputs, mask):
    """One step: the logits of real tokens (prefill) or the parameter gradients (train)."""
    attn, backend = IMPLS[impl]
    model.set_attn_implementation(attn)
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        if task == "prefill":
            with torch.no_grad():
                return model(**inputs).logits[mask]
        model.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def error(result, ref):
    """max |x - ref| / max |ref|: over the logits, or the worst parameter gradient."""
    if torch.is_tensor(result):
        return ((result.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    return max(error(result[n], ref[n]) for n in ref)


def build(cfg, args, device):
    """The model in args.dtype and its reference copy (the same weights in args.ref_dtype)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=CHIPLET)
    model = model.to(device=device, dtype=args.dtype)
    return model, copy.deepcopy(model).to(args.ref_dtype)


def compare_and_time(name, model, reference, batch, task, args, device):
    for m in (model, reference):
        m.train(task == "train")  # attention_dropout is 0: the same math in both modes
    inputs, mask = make_batch(batch, args.seqlen, model.config.vocab_size, device)
    ref = run(reference, EAGER, task, inputs, mask)
    row = {"model": name, "batch": batch, "task": task, "tokens": int(mask.sum())}
    outputs = {}
    for impl in IMPLS:
        row[f"{impl}_err"] = row[f"{impl}_ms"] = None
        try:
            with cfa_torch.active() if impl == SDPA_CHIPLET else contextlib.nullcontext():
                out = run(model, impl, task, inputs, mask)
                row[f"{impl}_err"] = error(out, ref)
                if impl in TIMED:
                    row[f"{impl}_ms"] = time_ms(lambda: run(model, impl, task, inputs, mask), min_total_ms=args.min_ms)
        except (RuntimeError, ValueError) as exc:  # an SDPA backend that does not take this case (flash with
            if IMPLS[impl][0] != "sdpa":           # a mask), or a transformers that refuses SDPA for the model
                raise
            row.setdefault("skipped", {})[impl] = str(exc).splitlines()[0][:200]
            continue
        if impl in BACKENDS or impl in (CHIPLET, SDPA_CHIPLET):
            outputs[impl] = out if task == "prefill" else {n: g.clone() for n, g in out.items()}
    backends = [b for b in BACKENDS if b in outputs]
    row["sdpa_spread"] = max((error(outputs[a], outputs[b]) for a in backends for b in backends if a < b), default=None)
    # the same kernels behind SDPA and behind the transformers backend
    row["sdpa_chiplet_fa_vs_own"] = (error(outputs[SDPA_CHIPLET], outputs[CHIPLET]) if SDPA_CHIPLET in outputs
                                     else None)
    row["two_x"] = row[f"{CHIPLET}_err"] <= 2 * row[f"{EAGER}_err"] + args.floor
    return row


def generate_rows(name, model, args, device):
    """Greedy decoding with chiplet_fa and with SDPA's default backends: tokens per second over the
    whole generate() call (prefill included), and how many generated tokens agree."""
    rows = []
    model.eval()
    for b in GENERATE_BATCHES:
        gen = torch.Generator().manual_seed(b)
        ids = torch.randint(1, model.config.vocab_size, (b, args.prompt), generator=gen)
        mask = torch.ones_like(ids)
        mask[1::2, : args.prompt // 4] = 0  # every other row left-padded by a quarter
        inputs = dict(input_ids=ids.to(device), attention_mask=mask.to(device))
        row = {"model": name, "batch": b, "prompt": args.prompt, "new": args.new_tokens}
        tokens = {}
        for impl in (CHIPLET, "sdpa"):
            row[f"{impl}_tok_s"] = None
            try:  # a transformers that refuses SDPA for the model (Gemma 2 after 5.17)
                model.set_attn_implementation(impl)
            except (RuntimeError, ValueError) as exc:
                row.setdefault("skipped", {})[impl] = str(exc).splitlines()[0][:200]
                continue

            def step():
                with torch.no_grad():
                    return model.generate(**inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                          do_sample=False, pad_token_id=0, cache_implementation="static")
            tokens[impl] = step()[:, args.prompt:]
            row[f"{impl}_tok_s"] = b * args.new_tokens / time_ms(step, min_total_ms=args.min_ms) * 1e3
        row["same_tokens"] = (tokens[CHIPLET] == tokens["sdpa"]).float().mean().item() if "sdpa" in tokens else None
        rows.append(row)
        print(row, flush=True)
    return rows


def fmt_ms(ms):
    return "n/a" if ms is None else f"{ms:.1f}" if ms >= 1 else f"{ms:.3f}"


def fmt_err(err):
    return "n/a" if err is None else f"{err:.2e}"


def markdown(result):
    rows = result["rows"]
    errs = [CHIPLET, EAGER, "sdpa"]
    timed = [i for i in TIMED if rows and f"{i}_ms" in rows[0]]  # tables from before sdpa_chiplet_fa lack it
    vs_own = bool(rows) and "sdpa_chiplet_fa_vs_own" in rows[0]
    lines = [f"# transformers models with chiplet_fa vs SDPA, {result['gpu']}", "", *harness.header_lines(result),
             f"torch {result['torch']}, transformers {result['transformers']}.", ""]
    if rows:
        lines += [
            "Times: median ms per step. Errors: max |x - ref| / max |ref| against eager attention in float32 "
            "(float64 for a float32 model) on the same weights: logits for prefill, the worst parameter gradient "
            "for train. 2x: chiplet_fa's error <= 2 x eager's in the model dtype + floor. SDPA spread: largest "
            "difference between two SDPA backends. transformers' SDPA ignores Gemma 2's attention softcap."
            + (f" {SDPA_CHIPLET}: SDPA's flash backend with chiplet_fa active as torch's flash-attention "
               "implementation; 'vs own' is its difference from the chiplet_fa backend's result." if vs_own else ""),
            "", "| model | batch | task | tokens | " + " | ".join(f"{i} ms" for i in timed)
            + " | sdpa / chiplet_fa | " + " | ".join(f"{i} err" for i in errs) + " | 2x | SDPA spread |"
            + (f" {SDPA_CHIPLET} vs own |" if vs_own else ""),
            "|" + "---|" * (7 + vs_own + len(timed) + len(errs))]
    for r in rows:
        speedup = "n/a" if not r["sdpa_ms"] else f"{r['sdpa_ms'] / r[f'{CHIPLET}_ms']:.2f}"
        lines.append(f"| {r['model']} | {r['batch']} | {r['task']} | {r['tokens']} | "
                     + " | ".join(fmt_ms(r[f"{i}_ms"]) for i in timed) + f" | {speedup} | "
                     + " | ".join(fmt_err(r[f"{i}_err"]) for i in errs)
                     + f" | {'yes' if r['two_x'] else 'NO'} | {fmt_err(r['sdpa_spread'])} |"
                     + (f" {fmt_err(r['sdpa_chiplet_fa_vs_own'])} |" if vs_own else ""))
    lines += generate_markdown(result.get("generate", []))
    return "\n".join(lines) + "\n"


def generate_markdown(rows):
    if not rows:
        return []
    lines = ["", "Generate: greedy decoding with a static cache, every other row left-padded by a quarter of the "
             "prompt; tokens per second over the whole generate() call (prefill included); same tokens: the share "
             "of generated tokens equal to SDPA's (random weights give near-ties that rounding may flip).", "",
             "| model | batch | prompt | new tokens | chiplet_fa tok/s | sdpa tok/s | chiplet_fa / sdpa | same tokens |",
             "|" + "---|" * 8]
    for r in rows:
        ours, sdpa = r[f"{CHIPLET}_tok_s"], r["sdpa_tok_s"]
        lines.append(f"| {r['model']} | {r['batch']} | {r['prompt']} | {r['new']} | {ours:.0f} | "
                     + (f"{sdpa:.0f} | {ours / sdpa:.2f} | {r['same_tokens']:.2f} |" if sdpa else "n/a | n/a | n/a |"))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tiny", action="store_true", help="tiny models and 64 tokens: a smoke test that runs on a CPU")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--batches", nargs="+", choices=BATCHES, default=list(BATCHES))
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ap.add_argument("--seqlen", type=int, help="tokens per batch row (default 16384; --tiny: 64)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt", type=int, help="generate: prompt tokens (default 1024; --tiny: 16)")
    ap.add_argument("--new-tokens", type=int, default=32, help="generate: tokens generated (default 32)")
    ap.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                    help="model dtype (default bfloat16; --tiny: float32)")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        sys.exit("bench/models.py needs a CUDA or ROCm device (or --tiny for a CPU smoke test)")
    args.seqlen = args.seqlen or (64 if args.tiny else 16384)
    args.prompt = args.prompt or (16 if args.tiny else 1024)
    args.dtype = getattr(torch, args.dtype or ("float32" if args.tiny else "bfloat16"))
    args.ref_dtype = torch.float64 if args.dtype == torch.float32 else torch.float32
    args.floor = 1e-5 if args.dtype == torch.float32 else 1e-3
    args.min_ms = 20.0 if args.tiny else 300.0
    cfgs = configs(args.tiny, args.layers)
    result = harness.result_header("models", torch=torch.__version__, transformers=transformers.__version__)
    rows, generated = [], []
    for name in args.models:
        model, reference = build(cfgs[name], args, device)
        if "generate" in args.tasks:
            generated += generate_rows(name, model, args, device)
        for batch in args.batches:
            for task in (t for t in args.tasks if t != "generate"):
                rows.append(compare_and_time(name, model, reference, batch, task, args, device))
                r = rows[-1]
                print(f"{name} {batch} {task}: chiplet_fa {fmt_ms(r[f'{CHIPLET}_ms'])} ms (err "
                      f"{fmt_err(r[f'{CHIPLET}_err'])}, eager {fmt_err(r[f'{EAGER}_err'])}), sdpa "
                      f"{fmt_ms(r['sdpa_ms'])} ms (err {fmt_err(r['sdpa_err'])}), spread "
                      f"{fmt_err(r['sdpa_spread'])}", flush=True)
                if device == "cuda":
                    torch.cuda.empty_cache()
        del model, reference
    print(harness.save_results(args.out, dict(result, rows=rows, generate=generated), markdown))
    return rows


if __name__ == "__main__":
    main()
