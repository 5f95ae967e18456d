// Scores of one (sequence, query head) as kernels/fwd_params.h defines them, in the CPU path's
// accumulator type: which keys a row sees, the logit of a scaled dot product, and the logit's
// derivative with respect to it (the backward's dS factor).
#pragma once
#include <algorithm>
#include <cmath>

#include "kernels/fwd_params.h"

namespace chiplet_fa {

template <typename Acc>
struct CpuScores {
  KeyWindow window;
  Acc softcap, slope;

  CpuScores(const FwdParams& p, int32_t b, int32_t q_head, const Sequence& s)
      : window(p.key_window(s)), softcap(Acc(p.softcap)), slope(Acc(p.alibi_slope(b, q_head))) {}

  // Keys [begin, end) of a block starting at n0 with `cols` keys that row i sees.
  int begin(int i, int n0) const { return std::max(0, window.begin(i) - n0); }
  int end(int i, int n0, int cols) const { return std::max(0, std::min(cols, window.end(i) - n0)); }

  // dot = (q * scale) . k; *grad = d logit / d dot.
  Acc logit(Acc dot, int i, int j, Acc* grad = nullptr) const {
    Acc x = dot, g = 1;
    if (softcap > 0) {
      const Acc t = std::tanh(dot / softcap);
      x = softcap * t;
      g = 1 - t * t;
    }
    if (slope != 0) x -= slope * std::abs(Acc(i + window.offset - j));
    if (grad) *grad = g;
    return x;
  }
};

}  // namespace chiplet_fa
