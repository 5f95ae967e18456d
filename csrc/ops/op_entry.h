// The operators' C++ signatures (as ops/schema.cpp declares them) turned into FwdArgs / BwdArgs for
// a backend, so each backend writes one forward and one backward over both layouts:
//   Fwd(const FwdArgs&, const OptTensor& out) -> (out, softmax_lse)
//   Bwd(const BwdArgs&) -> (dq, dk, dv)
#pragma once
#include <optional>
#include <string>
#include <tuple>

#include <torch/csrc/stable/library.h>

#include "ops/bwd_api.h"
#include "ops/fwd_api.h"

namespace chiplet_fa {

using FwdResult = std::tuple<Tensor, Tensor>;
using BwdResult = std::tuple<Tensor, Tensor, Tensor>;

inline MaskArgs mask_args(bool causal, int64_t left, int64_t right, double softcap,
                          const OptTensor& alibi_slopes) {
  return MaskArgs{causal, left, right, softcap, alibi_slopes};
}

using Library = torch::stable::detail::StableLibrary;

// A backend's forward entry as the forward operators (fwd, fwd_varlen, fwd_varlen.out). The file
// that defines the entry registers them beside it, boxed (torch's stable ABI calls every kernel
// through a stack of StableIValues):
//   STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, <dispatch key>, m) { FwdOpEntry<fwd_entry>::register_ops(m); }
template <FwdResult (*kFwd)(const FwdArgs&, const OptTensor&)>
struct FwdOpEntry {
  static FwdResult fwd(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                       bool causal, std::string mapping, int64_t num_xcds, int64_t left, int64_t right,
                       double softcap, const OptTensor& alibi, bool /*deterministic*/) {
    return kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping, num_xcds,
                        std::nullopt}, std::nullopt);
  }
  static FwdResult fwd_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& cu_q, const Tensor& cu_k, int64_t max_q, int64_t max_k,
                              std::optional<double> scale, bool causal, int64_t left, int64_t right, double softcap,
                              const OptTensor& alibi, std::string mapping, int64_t num_xcds,
                              bool /*deterministic*/) {
    return kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping, num_xcds,
                        VarlenArgs{cu_q, cu_k, max_q, max_k}}, std::nullopt);
  }
  static Tensor fwd_varlen_out(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& cu_q, const Tensor& cu_k, int64_t max_q, int64_t max_k,
                                  std::optional<double> scale, bool causal, int64_t left, int64_t right,
                                  double softcap, const OptTensor& alibi, std::string mapping,
                                  int64_t num_xcds, bool /*deterministic*/, Tensor& out) {
    return std::get<1>(kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                                    num_xcds, VarlenArgs{cu_q, cu_k, max_q, max_k}}, out));
  }

  static void register_ops(Library& m) {
    m.impl("fwd", TORCH_BOX(&fwd));
    m.impl("fwd_varlen", TORCH_BOX(&fwd_varlen));
    m.impl("fwd_varlen.out", TORCH_BOX(&fwd_varlen_out));
  }
};

// A backend's backward entry as the backward operators (bwd, bwd_varlen), registered as the
// forward's are, beside it.
template <BwdResult (*kBwd)(const BwdArgs&)>
struct BwdOpEntry {
  static BwdResult bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse, std::optional<double> scale, bool causal,
                       std::string mapping, int64_t num_xcds, bool deterministic, int64_t left, int64_t right,
                       double softcap, const OptTensor& alibi) {
    return kBwd(BwdArgs{dout, q, k, v, out, lse, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                        num_xcds, deterministic, std::nullopt});
  }
  static BwdResult bwd_varlen(const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& out, const Tensor& lse,
                              const Tensor& cu_q, const Tensor& cu_k, int64_t max_q, int64_t max_k,
                              std::optional<double> scale, bool causal, int64_t left, int64_t right, double softcap,
                              const OptTensor& alibi, std::string mapping, int64_t num_xcds,
                              bool deterministic) {
    return kBwd(BwdArgs{dout, q, k, v, out, lse, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                        num_xcds, deterministic, VarlenArgs{cu_q, cu_k, max_q, max_k}});
  }

  static void register_ops(Library& m) {
    m.impl("bwd", TORCH_BOX(&bwd));
    m.impl("bwd_varlen", TORCH_BOX(&bwd_varlen));
  }
};

}  // namespace chiplet_fa
