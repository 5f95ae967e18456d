// One interface over the matrix units: the backend of the translation unit's kernel family
// (arch/family.h): mma.sync for CFA_FAMILY_MMA_SYNC, wgmma for CFA_FAMILY_SM90, MFMA for
// CFA_FAMILY_CDNA3.
// Each backend defines, in namespace chiplet_fa::CFA_FAMILY::arch:
//   kWarpSize; Element<DType>::type;
//   padded_head_dim(d) (head dim the tiles and MMAs use; the tiles' rows, keys and warps are
//   chosen in kernels/tile_sizes.h);
//   SmemTile<kRows, kD> (kElems, offset(row, col): the shared-memory layout of a tile);
//   Acc<kMT, kN> (fp32 accumulator: kSize, kSlots, kRows, slot(i), row(i, lane), col(i, lane));
//   slot_row, owns_row_stats (which lane writes a row's statistics);
//   row_allreduce_max/sum over the lanes sharing a row; lane_group_sum<kLanes>; warp_any;
//   copy_16B_async/copy_commit/copy_wait<N> (global -> shared, zero-fill when !valid);
//   gemm_qk(S, sQ, sK, warp, lane) (S = Q K^T for the warp's rows), PFrag + pack_p / pack_p_pair,
//   gemm_pv(O, P, sV, warp, lane) (O += P V); block_sync; fast_tanh (the softcap); fast_exp2 (the
//   softmax: 2^x, 2^-inf = 0).
// The online softmax, masking and tiling in kernels/fwd_kernel.h use nothing else. The backward
// (kernels/bwd_kernel.h) also uses PaddedTile<kRows, kD> (row-major, kStride elements per row)
// and the products over any such tile, warp_gemm_abt(S, sA, sB, stride, lane) (S = A B^T) and
// warp_gemm_pv(O, P, sB, stride, lane) (O += P B): mma_sync.h in both NVIDIA families, cdna3.h
// on AMD. The sm90 family runs the warp-specialised kernels of kernels/sm90/, which use sm90.h's
// asynchronous warpgroup products (wgmma_qk/wgmma_pv, commit, wait) and sm90_sync.h;
// online_softmax.h and tile_io.h serve all.
#pragma once
#include "arch/family.h"

#if defined(CFA_FAMILY_CDNA3)
#include "arch/cdna3.h"
#elif defined(CFA_FAMILY_SM90)
#include "arch/sm90.h"
#else
#include "arch/sm80.h"
#endif
