// Every kernel family's tile choices, per pass and head dim (as instantiated): rows and keys per
// tile, warps, pipeline stages. The kernels take their tiles from here, and the host sizes its grids
// from the same functions (fwd_block_m, bwd_block_n, bwd_dq_block_m at the end), so the two cannot
// disagree. Shared-memory layouts and the products over them stay in arch/.
#pragma once
#include "arch/kernel_family.h"

namespace chiplet_fa {

// The generic forward (kernels/fwd_kernel.h): block_m query rows a workgroup, m_tiles 16-row
// m-tiles a warp, block_n keys a step.
struct FwdTiling {
  int block_m, block_n, m_tiles;
};

// The generic backward's main pass (kernels/bwd_kernel.h, BwdConfig): block_n keys a workgroup, one
// warp per 16; block_m query rows a step.
struct BwdTiling {
  int block_n, block_m;
};

// The backward's dQ pass (BwdDqConfig, every family): block_m query rows a workgroup, one warp per
// 16; block_n keys a step.
struct DqTiling {
  int block_m, block_n;
};

// The warpgroups of a warp-specialised sm90 kernel: `consumers` beside a producer, and the
// registers a thread of each keeps after setmaxnreg.
struct Sm90Warps {
  int consumers, producer_regs, consumer_regs;
};

// The sm90 forward: its consumers own 64 query rows each; its Q and K/V buffers are rings of
// q_stages and kv_stages.
struct Sm90FwdTiling {
  Sm90Warps warps;
  int block_m, block_n;
  int q_stages, kv_stages;
};

// The sm90 backward's main pass: block_n keys a workgroup, block_m query rows a step, whose Q, dO,
// lse_log2 and D come through a ring of `stages` buffers.
struct Sm90BwdTiling {
  int block_n, block_m;
  int stages;
};

// --- mma_sync (arch/sm80.h, arch/mma_sync.h) ---

// Two m-tiles per warp let each K/V fragment read from shared memory feed twice the MMAs (one
// m-tile leaves the kernel bound by ldmatrix bandwidth); above D = 128 the output accumulator no
// longer fits twice in registers. 64 keys a step at D = 96, 128 would need > 255 registers.
constexpr FwdTiling mma_sync_fwd_tiling(int d) {
  const int m_tiles = d <= 128 ? 2 : 1;
  return {128, m_tiles == 2 && d > 64 ? 32 : 64, m_tiles};
}

// dK and dV accumulators live in registers for the whole workgroup, so wide heads take fewer
// query rows a step (S^T, dP^T stay small).
constexpr BwdTiling mma_sync_bwd_tiling(int d) { return {64, d <= 64 ? 64 : 32}; }

// The dQ pass of both NVIDIA families: its 64-row Q and dO tiles stay in shared memory beside K
// and V, 101 KB at D = 256 with 32 keys.
constexpr DqTiling nvidia_dq_tiling(int d) { return {64, d <= 128 ? 64 : 32}; }

// --- sm90 (kernels/sm90/) ---

// Shared memory a workgroup may use on sm_90.
constexpr int kSm90SmemBytes = 227 * 1024;
// Tiles are whole 64-column panels (arch/sm90.h): head dims below a multiple of 64 run zero-padded.
constexpr int sm90_panel_cols(int d) { return (d + 63) / 64 * 64; }

// 65536 / 384 = 168 registers a thread at launch; the producer, which only issues copies, gives
// most of its share to the consumers (40 * 128 + 232 * 256 <= 168 * 384; at 24 or 32 its per-tile
// mapping arithmetic spills more, and the consumers need no more than 232). Up to D = 64 a
// consumer's O takes 32 registers and its scores 64 + 32 packed, so three consumers fit 160 each
// (32 * 128 + 160 * 384 = 128 * 512): every K/V block then serves 192 rows, half as many again,
// and a third warpgroup's softmax hides the other two's products (FlashAttention-3's tile there).
// S (64 x block_n a consumer) and O (64 x D) share the register file: 128 keys up to D = 128.
// Q stages (two let the next tile's Q land while this one's is in use) and K/V stages as many as
// fit beside each other: two of Q and three of K/V at D = 64, two and two at D = 128 and 192, one
// and two at D = 256 (1 KB left for the barriers; kernels/sm90/fwd_kernel_sm90.h checks the rest).
constexpr Sm90FwdTiling sm90_fwd_tiling(int d, int elem_bytes) {
  const int cols = sm90_panel_cols(d);
  const Sm90Warps warps = cols <= 64 ? Sm90Warps{3, 32, 160} : Sm90Warps{2, 40, 232};
  const int block_m = 64 * warps.consumers, block_n = cols <= 128 ? 128 : 64;
  const auto fits = [&](int q, int kv) {
    return (q * block_m + 2 * kv * block_n) * cols * elem_bytes + 1024 <= kSm90SmemBytes;
  };
  const int q_stages = fits(2, 2) ? 2 : 1;
  return {warps, block_m, block_n, q_stages, fits(q_stages, 3) ? 3 : 2};
}

// Consumers hold dK, dV (128 registers at D = 128), S^T and dP^T (64), P^T and dS^T packed (32):
// 224 spills in the causal kernels, and 40 + 2 * 232 takes the whole pool of 168 * 3.
constexpr Sm90Warps kSm90BwdWarps = {2, 40, 232};

// Up to D = 128 each consumer owns 64 keys; above, the two share one block of 64 (kWide). At
// D = 256 a second stage of Q and dO (64 KB) does not fit beside K, V, P^T, dS^T and dQ's staging.
constexpr Sm90BwdTiling sm90_bwd_tiling(int d) {
  return {sm90_panel_cols(d) > 128 ? 64 : 64 * kSm90BwdWarps.consumers, 64, sm90_panel_cols(d) > 192 ? 1 : 2};
}

// --- cdna3 (arch/cdna3.h) ---

// gfx942 gives a workgroup 64 KB of LDS (arch::kMaxSmemBytes), which above D = 128 is what limits
// a tile: the generic kernels' tiles there fit with half the rows or keys.
constexpr bool cdna3_wide(int d) { return d > 128; }

// As mma_sync up to D = 128 (two m-tiles per wave, 32 keys a step above D = 64). Above, the
// forward's 64-row Q tile leaves room for K and V blocks of 32 keys at D = 192 (51 KB) and 16 at
// D = 256 (50 KB).
constexpr FwdTiling cdna3_fwd_tiling(int d) {
  return {cdna3_wide(d) ? 64 : 128, d <= 64 ? 64 : d <= 192 ? 32 : 16, d <= 128 ? 2 : 1};
}

// K and V of its keys, Q and dO of a step's rows and dS^T in LDS: at D = 256 32 keys leave room
// for 16 rows (52 KB).
constexpr BwdTiling cdna3_bwd_tiling(int d) {
  return {cdna3_wide(d) ? 32 : 64, d <= 64 ? 64 : d <= 192 ? 32 : 16};
}

// The dQ pass's Q and dO tiles stay in LDS beside K and V: at D = 128 K and V of 64 keys would
// bring that to 68 KB.
constexpr DqTiling cdna3_dq_tiling(int d) {
  return {cdna3_wide(d) ? 32 : 64, d <= 96 ? 64 : d <= 192 ? 32 : 16};
}

// --- by family: what the generic kernels and the host ask ---

// The generic kernels' tiles in the families that run them (sm90 runs its own forward and main pass).
constexpr FwdTiling fwd_tiling(KernelFamily f, int d) {
  return f == KernelFamily::kCdna3 ? cdna3_fwd_tiling(d) : mma_sync_fwd_tiling(d);
}
constexpr BwdTiling bwd_tiling(KernelFamily f, int d) {
  return f == KernelFamily::kCdna3 ? cdna3_bwd_tiling(d) : mma_sync_bwd_tiling(d);
}
constexpr DqTiling dq_tiling(KernelFamily f, int d) {
  return f == KernelFamily::kCdna3 ? cdna3_dq_tiling(d) : nvidia_dq_tiling(d);
}

// Query rows per forward workgroup (fixes num_m_blocks for the mapping; sm90's rows do not depend
// on the element size).
constexpr int fwd_block_m(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 ? sm90_fwd_tiling(head_dim, 2).block_m : fwd_tiling(f, head_dim).block_m;
}

// Keys per workgroup of the backward's main pass (fixes num_n_blocks).
constexpr int bwd_block_n(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 ? sm90_bwd_tiling(head_dim).block_n : bwd_tiling(f, head_dim).block_n;
}

// Query rows per workgroup of the deterministic dQ pass.
constexpr int bwd_dq_block_m(KernelFamily f, int head_dim) { return dq_tiling(f, head_dim).block_m; }

// --- decoding (kernels/decode/), mma_sync and cdna3 (sm90 decodes with mma_sync's) ---
// One warp (wave) a workgroup, its one 16-row m-tile holding (token, query head) pairs of a KV
// head's group: decoding rows are few, and the cache's bytes, not the products, bound a step.
// 64 keys a step (Q, K and V take 36 KB at D = 128); cdna3 as its forward above D = 64, the LDS
// holding K and V of 32 keys at D = 192 and 16 at D = 256.
constexpr FwdTiling decode_tiling(KernelFamily f, int d) {
  return {16, f == KernelFamily::kCdna3 ? cdna3_fwd_tiling(d).block_n : 64, 1};
}

}  // namespace chiplet_fa
