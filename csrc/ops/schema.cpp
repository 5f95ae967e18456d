// The operator schemas. A backend registers its forward and its backward for them beside each
// (FwdOpEntry / BwdOpEntry::register_ops, ops/op_entry.h); the fake (meta) kernels and autograd
// formulas live in chiplet_fa/_ops.py and chiplet_fa/_autograd.py. Masks follow flash-attention:
// window (left, right) around the bottom-right-aligned diagonal, -1 unbounded, causal = right 0;
// softcap 0 = none; alibi_slopes float32 (H_q,) or (B, H_q). A forward's `deterministic` is for
// autograd: the backward it leads to runs without atomics (as also under
// torch.use_deterministic_algorithms).
#include <torch/csrc/stable/library.h>

#define CFA_MASK_ARGS "int window_left=-1, int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None"

STABLE_TORCH_LIBRARY(chiplet_fa, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False, "
        "str mapping=\"auto\", int num_xcds=-1, " CFA_MASK_ARGS ", bool deterministic=False) "
        "-> (Tensor out, Tensor softmax_lse)");
  m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
        "float? softmax_scale=None, bool causal=False, str mapping=\"auto\", int num_xcds=-1, "
        "bool deterministic=False, " CFA_MASK_ARGS ") -> (Tensor dq, Tensor dk, Tensor dv)");
  // Packed variable-length batches: q (T_q, H_q, D), k/v (T_k, H_kv, D), int32 cu_seqlens (B + 1),
  // max lengths as host integers (no device-to-host copy); softmax_lse (H_q, T_q). The out=
  // overload writes the attention into `out` (like q) and returns softmax_lse alone, so graphs that
  // preallocate (serving, CUDA graphs) stay functionalizable.
  m.def("fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "int max_seqlen_q, int max_seqlen_k, float? softmax_scale=None, bool causal=False, " CFA_MASK_ARGS
        ", str mapping=\"auto\", int num_xcds=-1, bool deterministic=False) -> (Tensor out, Tensor softmax_lse)");
  m.def("fwd_varlen.out(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "int max_seqlen_q, int max_seqlen_k, float? softmax_scale=None, bool causal=False, " CFA_MASK_ARGS
        ", str mapping=\"auto\", int num_xcds=-1, bool deterministic=False, *, Tensor(a!) out) -> Tensor softmax_lse");
  m.def("bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "
        "float? softmax_scale=None, bool causal=False, " CFA_MASK_ARGS
        ", str mapping=\"auto\", int num_xcds=-1, bool deterministic=False) -> (Tensor dq, Tensor dk, Tensor dv)");
  // KV-cache decoding (flash-attention's flash_attn_with_kvcache): k/v, when given, are written into
  // the caches in place at cache_seqlens before attention reads them; softmax_lse (B, H_q, N_q).
  m.def("fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k=None, Tensor? v=None, "
        "Tensor? rotary_cos=None, Tensor? rotary_sin=None, Tensor? cache_seqlens=None, Tensor? cache_batch_idx=None, "
        "Tensor? cache_leftpad=None, Tensor? block_table=None, float? softmax_scale=None, bool causal=False, "
        "int window_left=-1, int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, "
        "bool rotary_interleaved=True, int num_splits=0, str mapping=\"auto\", int num_xcds=-1) "
        "-> (Tensor out, Tensor softmax_lse)");
}
