// FlashAttention's online softmax for the rows a warp owns, shared by every forward kernel:
// scores of one key block become base-2 logits (kernels/scores.h; masked outside the rows' key
// windows), are folded into running row statistics (rescaling O when needed) and become the
// unnormalised P of the PV product.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/fwd_params.h"
#include "kernels/scores.h"

namespace chiplet_fa::CFA_FAMILY {

// kWindowed: keys outside a window around the diagonal (causal, sliding) are masked; without it
// only keys past the sequence's end are.
template <typename SAcc, typename OAcc, int kBlockN, bool kWindowed>
struct OnlineSoftmax {
  static constexpr int kSlots = SAcc::kSlots;
  // The reference max of a row only moves (and O, row_sum are rescaled) when the row's max
  // grew by more than this, so most steps skip the rescale; p = 2^(s - ref) stays below 2^8.
  static constexpr float kRescaleSlack = 8.f;

  float row_max[kSlots], row_sum[kSlots];

  CFA_DEVICE OnlineSoftmax() {
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Whether block n0 has keys that some row from warp_row0 must not see: past the sequence's end
  // or outside a row's window. Most blocks have none.
  static CFA_DEVICE bool needs_mask(const KeyWindow& w, int n0, int warp_row0) {
    if (n0 + kBlockN > w.len_k) return true;
    if constexpr (kWindowed) return n0 < w.begin(warp_row0 + SAcc::kRows - 1) || n0 + kBlockN > w.end(warp_row0);
    return false;
  }
  // Each row slot's visible keys [lo, hi) of the block are found once, so a score costs two compares
  // and a select (per score, the window's fields re-read from shared memory and a branch had made
  // the diagonal block of a causal tile 1175 instructions a warp; docs/sm90_forward.md, "Masking").
  // w is a copy: the caller's may live in shared memory.
  static CFA_DEVICE void mask(SAcc& s, const KeyWindow w, int n0, int warp_row0, int lane) {
    int lo[kSlots], hi[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      const int row = warp_row0 + arch::slot_row(r, lane);
      lo[r] = kWindowed ? w.begin(row) - n0 : 0;  // begin and end as in KeyWindow::visible
      hi[r] = (kWindowed ? w.end(row) : w.len_k) - n0;
    }
#pragma unroll
    for (int i = 0; i < SAcc::kSize; ++i) {
      const int col = SAcc::col(i, lane), r = SAcc::slot(i);
      s.x[i] = col >= lo[r] && col < hi[r] ? s.x[i] : -INFINITY;
    }
  }
  // Scores of key block n0 to masked logits (kPlain: no softcap, no ALiBi).
  template <bool kPlain>
  static CFA_DEVICE void logits(SAcc& s, const ScoreMod& mod, const KeyWindow& w, int n0, int warp_row0, int lane) {
    mod.template to_logits<kPlain>(s, warp_row0, n0, lane);
    if (needs_mask(w, n0, warp_row0)) mask(s, w, n0, warp_row0, lane);
  }

  // How O must be rescaled after a fold: by alpha per slot, when any row's reference moved.
  struct Rescale {
    bool any;
    float alpha[kSlots];
  };

  // Folds a block of logits (times scale > 0, ScoreMod::exp_scale) into the row statistics, kept
  // in logit units, and turns s into P; O is left to rescale(), so a kernel may fold while the
  // product that last wrote O is still running. A row with no visible key yet keeps ref = -inf
  // and contributes p = 0. Maxima and sums run over kPartials independent chains per row: one
  // chain of kSize / kSlots dependent operations would leave the warp waiting on latency.
  CFA_DEVICE Rescale fold(SAcc& s, float scale) {
    constexpr int kPartials = 4;
    float block_max[kSlots][kPartials], ref[kSlots], block_sum[kSlots][kPartials];
#pragma unroll
    for (int r = 0; r < kSlots; ++r)
#pragma unroll
      for (int j = 0; j < kPartials; ++j) {
        block_max[r][j] = -INFINITY;
        block_sum[r][j] = 0.f;
      }
#pragma unroll
    for (int i = 0; i < SAcc::kSize; ++i) {
      float& m = block_max[SAcc::slot(i)][(i / 4) % kPartials];
      m = fmaxf(m, s.x[i]);
    }
    bool grow = false;
    float new_max[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
#pragma unroll
      for (int j = 1; j < kPartials; ++j) block_max[r][0] = fmaxf(block_max[r][0], block_max[r][j]);
      new_max[r] = arch::row_allreduce_max(block_max[r][0]) * scale;
      grow |= new_max[r] > row_max[r] + kRescaleSlack;
    }
    Rescale re{arch::warp_any(grow), {}};
#pragma unroll
    for (int r = 0; r < kSlots; ++r) re.alpha[r] = 1.f;
    if (re.any) {
#pragma unroll
      for (int r = 0; r < kSlots; ++r) {
        new_max[r] = fmaxf(row_max[r], new_max[r]);
        re.alpha[r] = new_max[r] == -INFINITY ? 1.f : arch::fast_exp2(row_max[r] - new_max[r]);
        row_max[r] = new_max[r];
        row_sum[r] *= re.alpha[r];
      }
    }
#pragma unroll
    for (int r = 0; r < kSlots; ++r) ref[r] = row_max[r] == -INFINITY ? 0.f : row_max[r];
#pragma unroll
    for (int i = 0; i < SAcc::kSize; ++i) {
      s.x[i] = arch::fast_exp2(fmaf(s.x[i], scale, -ref[SAcc::slot(i)]));
      block_sum[SAcc::slot(i)][(i / 4) % kPartials] += s.x[i];
    }
    // Partial row sums stay per lane (lanes of a row share ref): one reduction in finish().
#pragma unroll
    for (int r = 0; r < kSlots; ++r)
#pragma unroll
      for (int j = 0; j < kPartials; ++j) row_sum[r] += block_sum[r][j];
    return re;
  }

  static CFA_DEVICE void rescale(OAcc& o, const Rescale& re) {
    if (!re.any) return;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] *= re.alpha[OAcc::slot(i)];
  }

  CFA_DEVICE void update(SAcc& s, OAcc& o, float scale) { rescale(o, fold(s, scale)); }

  // 1 / row sum per slot (0 for a row that saw no key), and the row's natural-log
  // log-sum-exp written to lse[row] for rows below seqlen_q.
  CFA_DEVICE void finish(float (&inv_sum)[kSlots], float* lse, int seqlen_q, int warp_row0, int lane) {
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      row_sum[r] = arch::row_allreduce_sum(row_sum[r]);
      inv_sum[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
      const int row = warp_row0 + arch::slot_row(r, lane);
      if (arch::owns_row_stats(lane) && row < seqlen_q)
        lse[row] = row_sum[r] > 0.f ? row_max[r] * float(M_LN2) + logf(row_sum[r]) : -INFINITY;
    }
  }
};

}  // namespace chiplet_fa::CFA_FAMILY
