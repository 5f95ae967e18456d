// The forward's tile products (arch.h: gemm_qk, gemm_pv) for backends whose tiles are
// PaddedTile: thin adapters over the backend's stride-taking warp_gemm_abt / warp_gemm_pv.
// Included by such a backend (sm80.h, cdna3.h) after it defines those.
#pragma once

namespace chiplet_fa::CFA_FAMILY::arch {

// s = Q K^T for warp `warp`'s 16*kMT rows of the Q tile and the kN keys of the K tile.
template <typename T, int kMT, int kN, int kD, int kQRows>
CFA_DEVICE void gemm_qk(Acc<kMT, kN>& s, const T* sQ, const T* sK, int warp, int lane) {
  constexpr int stride = SmemTile<kQRows, kD>::kStride;
  warp_gemm_abt<T, kMT, kN, kD>(s, sQ + warp * 16 * kMT * stride, sK, stride, lane);
}

// o += P V with the whole V tile (every warp multiplies by all kN keys).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void gemm_pv(Acc<kMT, kD>& o, const PFrag<T, kMT, kN>& pf, const T* sV, int warp, int lane) {
  (void)warp;
  warp_gemm_pv<T, kMT, kN, kD>(o, pf, sV, SmemTile<kN, kD>::kStride, lane);
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
