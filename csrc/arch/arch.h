// One interface over the matrix units, chosen at compile time. Each backend defines, in
// namespace chiplet_fa::arch:
//   kWarpSize, kRowsPerWarp (query rows one warp/wave owns), kRowSlots (distinct rows a lane
//   holds), kSmemPad (elements appended to each shared-memory row), Element<DType>::type;
//   Acc<kN> (16 x kN fp32 accumulator) with acc_slot/acc_row/acc_col giving each element's
//   row slot, row and column; slot_row, owns_row_stats (which lane writes a row's statistics);
//   row_allreduce_max/sum over the lanes that share a row;
//   copy_16B_async/copy_commit/copy_wait<N> (global -> shared, zero-fill when !valid);
//   QFrag<T, kD> + load_q, gemm_qk (S = Q K^T), gemm_pv (O += P V), block_sync.
// The online softmax, masking and tiling in fwd_kernel.h use nothing else.
#pragma once
#include "../platform.h"

#if defined(CFA_HIP)
#include "cdna3.h"
#elif defined(CFA_CUDA)
#include "sm80.h"
#endif
