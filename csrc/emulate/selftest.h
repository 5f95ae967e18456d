// Small HIP-style kernels that exercise the emulator itself, for tests/test_emulator.py: the MFMA
// builtins with operands the caller lays out, the cross-lane operations, barriers and LDS, and
// kernels that break the rules the emulator enforces (each must raise, not hang).
#pragma once
#include <cstdint>
#include <string>

namespace chiplet_fa::emu::selftest {

// One wave calls __builtin_amdgcn_mfma_f32_16x16x16{f16,bf16_1k} once: lane l passes a[l][0..3],
// b[l][0..3] (raw 16-bit values) and c[l][0..3] and gets d[l][0..3].
void mfma(bool bf16, const uint16_t* a, const uint16_t* b, const float* c, float* d);
// out[t] = __shfl_xor(in[t], lane_mask, width) in a workgroup of `threads` work-items.
void shfl_xor(int threads, int lane_mask, int width, const float* in, float* out);
// out[t] = __any(in[t]).
void any(int threads, const int* in, int* out);
// `rounds` times: work-item t writes a value to LDS word t, all pass __syncthreads, t reads word
// (t + shift) % threads into out[round * threads + t], all pass __syncthreads again. Without
// `barriers` the kernel races: what it reads depends on the schedule (Schedule in workgroup.h).
void barrier_exchange(int threads, int shift, int rounds, bool barriers, int* out);
// Launches a kernel that counts its workgroups with this grid, workgroup and LDS size: the count,
// or the refusal of a launch beyond the hardware's limits (kernel_launch.h).
int64_t count_workgroups(const unsigned (&grid)[3], const unsigned (&block)[3], size_t lds_bytes);
// What a work-item reads from LDS no one wrote (the emulator poisons it: NaN).
float unwritten_lds();
// Runs one of the broken kernels: early_return, divergent_wave_op, divergent_call_site,
// extra_barrier, misaligned_read, lds_overrun, partial_wave_mfma. Each throws std::runtime_error.
void broken(const std::string& which);

}  // namespace chiplet_fa::emu::selftest
