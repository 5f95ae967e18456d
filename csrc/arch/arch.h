// One interface over the matrix units, chosen at compile time (for host and device passes
// alike, so launch geometry agrees): CDNA3 MFMA for HIP, wgmma when the build targets sm_90a
// only (CMake defines CFA_WGMMA), otherwise mma.sync for sm_80+.
// Each backend defines, in namespace chiplet_fa::arch:
//   kWarpSize; Element<DType>::type;
//   padded_head_dim(d) (head dim the tiles and MMAs use), m_tiles_per_warp(d) (16-row m-tiles
//   a warp owns), block_n(d) (keys per step);
//   SmemTile<kRows, kD> (kElems, offset(row, col): the shared-memory layout of a tile);
//   Acc<kMT, kN> (fp32 accumulator: kSize, kSlots, slot(i), row(i, lane), col(i, lane));
//   slot_row, owns_row_stats (which lane writes a row's statistics);
//   row_allreduce_max/sum over the lanes sharing a row; warp_any;
//   copy_16B_async/copy_commit/copy_wait<N> (global -> shared, zero-fill when !valid);
//   gemm_qk(S, sQ, sK, warp, lane) (S = Q K^T for the warp's rows), PFrag + pack_p,
//   gemm_pv(O, P, sV, warp, lane) (O += P V); block_sync.
// The online softmax, masking and tiling in fwd_kernel.h use nothing else. The backward
// (bwd_kernel.h) also uses PaddedTile<kRows, kD> (row-major, kStride elements per row) and the
// products over any such tile, warp_gemm_abt(S, sA, sB, stride, lane) (S = A B^T) and
// warp_gemm_pv(O, P, sB, stride, lane) (O += P B), and bwd_dq_block_n(d) (keys per step of its
// dQ pass): mma_sync.h on every NVIDIA build, cdna3.h on HIP. The sm_90a build
// runs the warp-specialised fwd_kernel_sm90.h instead, which uses sm90.h's asynchronous
// warpgroup products (wgmma_qk/wgmma_pv, commit, wait) and sm90_sync.h; online_softmax.h and
// tile_io.h serve both kernels.
#pragma once
#include "../platform.h"

#if defined(CFA_HIP)
#include "cdna3.h"
#elif defined(CFA_CUDA) && defined(CFA_WGMMA)
#include "sm90.h"
#elif defined(CFA_CUDA)
#include "sm80.h"
#endif
