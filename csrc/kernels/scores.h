// How a kernel turns raw scores s = q.k of one (sequence, query head) into the base-2 logits its
// softmax exponentiates (kernels/fwd_params.h defines the scores):
//   plain:   logit = s * scale * log2(e)
//   softcap: logit = tanh(s * scale / c) * c * log2(e)
//   ALiBi:   logit -= slope * log2(e) * |i + offset - j|   (query row i, key j of the sequence)
// The backward also needs d logit / d(s * scale) / log2(e): 1 - tanh^2 with a softcap, else 1.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/fwd_params.h"

namespace chiplet_fa::CFA_FAMILY {

struct ScoreMod {
  float scale_log2;  // no softcap
  float cap_in, cap_out;
  float slope_log2;  // 0: no ALiBi
  int32_t offset;
  bool softcap;

  // offset: the key on query row 0's diagonal, for ALiBi.
  CFA_DEVICE ScoreMod(double scale, float cap, float slope, int32_t offset)
      : scale_log2(float(scale) * float(M_LOG2E)),
        cap_in(cap > 0.f ? float(scale) / cap : 0.f),
        cap_out(cap * float(M_LOG2E)),
        slope_log2(slope * float(M_LOG2E)),
        offset(offset),
        softcap(cap > 0.f) {}
  CFA_DEVICE ScoreMod(const FwdParams& p, int32_t b, int32_t q_head, const Sequence& s)
      : ScoreMod(p.softmax_scale, p.softcap, p.alibi_slope(b, q_head), s.len_k - s.len_q) {}

  // What the online softmax still multiplies logits by: a plain kernel leaves the scores raw
  // (to_logits does nothing), takes row maxima of them and folds scale, subtraction of the max
  // and exp2 into one FFMA and one MUFU a score. Needs softmax_scale > 0 (plain_scores checks).
  template <bool kPlain>
  CFA_DEVICE float exp_scale() const {
    return kPlain ? scale_log2 : 1.f;
  }

  // Neither softcap nor ALiBi: the logit is one multiply, which hot loops keep apart.
  CFA_DEVICE bool plain() const { return !softcap && slope_log2 == 0.f; }

  CFA_DEVICE float bias(int row, int col) const { return slope_log2 * fabsf(float(row + offset - col)); }

  // The logit of score s at (query row, key col), and the backward's factor in *grad.
  CFA_DEVICE float logit(float s, int row, int col, float* grad) const {
    float x = s * scale_log2, g = 1.f;
    if (softcap) {
      const float t = arch::fast_tanh(s * cap_in);
      x = t * cap_out;
      g = 1.f - t * t;
    }
    *grad = g;
    return slope_log2 == 0.f ? x : x - bias(row, col);
  }

  // An accumulator of scores (query rows from row0, keys from col0 in the arch's row/col layout)
  // to logits in place; kPlain: the caller knows plain() holds.
  template <bool kPlain = false, typename Acc>
  CFA_DEVICE void to_logits(Acc& s, int row0, int col0, int lane) const {
    if constexpr (kPlain) return;  // the softmax applies scale_log2 inside its exp2 (exp_scale)
    if (!softcap) {
#pragma unroll
      for (int i = 0; i < Acc::kSize; ++i) s.x[i] *= scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < Acc::kSize; ++i) s.x[i] = arch::fast_tanh(s.x[i] * cap_in) * cap_out;
    }
    if (!kPlain && slope_log2 != 0.f) {
#pragma unroll
      for (int i = 0; i < Acc::kSize; ++i) s.x[i] -= bias(row0 + Acc::row(i, lane), col0 + Acc::col(i, lane));
    }
  }
};

}  // namespace chiplet_fa::CFA_FAMILY
