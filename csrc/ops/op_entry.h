// The operators' C++ signatures (as ops/schema.cpp declares them) turned into FwdArgs / BwdArgs for
// a backend, so each backend writes one forward and one backward over both layouts:
//   Fwd(const FwdArgs&, const std::optional<at::Tensor>& out) -> (out, softmax_lse)
//   Bwd(const BwdArgs&) -> (dq, dk, dv)
#pragma once
#include <optional>
#include <string>
#include <tuple>

#include <torch/library.h>

#include "ops/bwd_api.h"
#include "ops/fwd_api.h"

namespace chiplet_fa {

using FwdResult = std::tuple<at::Tensor, at::Tensor>;
using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

inline MaskArgs mask_args(bool causal, int64_t left, int64_t right, double softcap,
                          const std::optional<at::Tensor>& alibi_slopes) {
  return MaskArgs{causal, left, right, softcap, alibi_slopes};
}

// A backend's forward entry as the forward operators (fwd, fwd_varlen, fwd_varlen.out). The file
// that defines the entry registers them beside it:
//   TORCH_LIBRARY_IMPL(chiplet_fa, <dispatch key>, m) { FwdOpEntry<fwd_entry>::register_ops(m); }
template <FwdResult (*kFwd)(const FwdArgs&, const std::optional<at::Tensor>&)>
struct FwdOpEntry {
  static FwdResult fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::optional<double> scale,
                       bool causal, std::string mapping, int64_t num_xcds, int64_t left, int64_t right,
                       double softcap, const std::optional<at::Tensor>& alibi, bool /*deterministic*/) {
    return kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping, num_xcds,
                        std::nullopt}, std::nullopt);
  }
  static FwdResult fwd_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
                              std::optional<double> scale, bool causal, int64_t left, int64_t right, double softcap,
                              const std::optional<at::Tensor>& alibi, std::string mapping, int64_t num_xcds,
                              bool /*deterministic*/) {
    return kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping, num_xcds,
                        VarlenArgs{cu_q, cu_k, max_q, max_k}}, std::nullopt);
  }
  static at::Tensor fwd_varlen_out(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
                                  std::optional<double> scale, bool causal, int64_t left, int64_t right,
                                  double softcap, const std::optional<at::Tensor>& alibi, std::string mapping,
                                  int64_t num_xcds, bool /*deterministic*/, at::Tensor& out) {
    return std::get<1>(kFwd(FwdArgs{q, k, v, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                                    num_xcds, VarlenArgs{cu_q, cu_k, max_q, max_k}}, out));
  }

  static void register_ops(torch::Library& m) {
    m.impl("fwd", &fwd);
    m.impl("fwd_varlen", &fwd_varlen);
    m.impl("fwd_varlen.out", &fwd_varlen_out);
  }
};

// A backend's backward entry as the backward operators (bwd, bwd_varlen), registered as the
// forward's are, beside it.
template <BwdResult (*kBwd)(const BwdArgs&)>
struct BwdOpEntry {
  static BwdResult bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& out, const at::Tensor& lse, std::optional<double> scale, bool causal,
                       std::string mapping, int64_t num_xcds, bool deterministic, int64_t left, int64_t right,
                       double softcap, const std::optional<at::Tensor>& alibi) {
    return kBwd(BwdArgs{dout, q, k, v, out, lse, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                        num_xcds, deterministic, std::nullopt});
  }
  static BwdResult bwd_varlen(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                              const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q, int64_t max_k,
                              std::optional<double> scale, bool causal, int64_t left, int64_t right, double softcap,
                              const std::optional<at::Tensor>& alibi, std::string mapping, int64_t num_xcds,
                              bool deterministic) {
    return kBwd(BwdArgs{dout, q, k, v, out, lse, scale, mask_args(causal, left, right, softcap, alibi), mapping,
                        num_xcds, deterministic, VarlenArgs{cu_q, cu_k, max_q, max_k}});
  }

  static void register_ops(torch::Library& m) {
    m.impl("bwd", &bwd);
    m.impl("bwd_varlen", &bwd_varlen);
  }
};

}  // namespace chiplet_fa
