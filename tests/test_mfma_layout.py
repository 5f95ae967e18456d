"""CPU model of csrc/arch/cdna3.h's index algebra (the AMD gfx942 backend, which cannot run here).

The v_mfma_f32_16x16x16 operand layouts are encoded as documented (lane l, r = l % 16,
g = l // 16, element j: A[r][4g+j], B[4g+j][r], C/D[4g+j][r]); warp_gemm_abt, pack_p and
warp_gemm_pv are replayed lane by lane with the same offset arithmetic as the C++ over an LDS
image with padded rows; the accumulators are then read back through Acc::row/col and compared
with A B^T and P V, for the forward's shapes and the backward's (including add_dq's round trip
of dS^T through shared memory).
This checks the index formulas and that they agree with the layouts as documented; it cannot
check the documentation against hardware, the compiler, or timing.
"""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

HEADER = (Path(__file__).resolve().parent.parent / "csrc" / "arch" / "cdna3.h").read_text()
SMEM_PAD = int(re.search(r"constexpr int kSmemPad = (\d+);", HEADER).group(1))
WAVE = 64
LANE = np.arange(WAVE)
R, G = LANE % 16, LANE // 16
J = np.arange(4)

# (kMT, kN, kD) as fwd_kernel.h's FwdConfig picks them for the head dims built for HIP, then
# bwd_kernel.h's one-m-tile products: S^T, dP^T, dV, dK (kN = kBlockM: 64 up to D=64, else 32)
# and the dQ pass (kN = its kBlockN: 64, 32 at D=128).
CONFIGS = [(2, 64, 32), (2, 64, 64), (2, 32, 96), (2, 32, 128),
           (1, 64, 32), (1, 64, 64), (1, 32, 96), (1, 32, 128), (1, 64, 96)]
# add_dq's dS K over a column slice of K: kN = kBlockN = 64 keys, kD = kDqCols (48 at D=96).
PV_CONFIGS = CONFIGS + [(1, 64, 48)]


def mfma(a, b, c):
    """v_mfma_f32_16x16x16: per-lane operands (64, 4) -> per-lane result (64, 4)."""
    A, B, C = np.zeros((16, 16)), np.zeros((16, 16)), np.zeros((16, 16))
    A[R[:, None], 4 * G[:, None] + J] = a
    B[4 * G[:, None] + J, R[:, None]] = b
    C[4 * G[:, None] + J, R[:, None]] = c
    D = A @ B + C
    return D[4 * G[:, None] + J, R[:, None]]


# Acc<kMT, kN>: index i = t*(kN/4) + nt*4 + j.
def acc_slot(i, kN):
    return i // (kN // 4)


def acc_row(i, lane, kN):
    return 16 * acc_slot(i, kN) + lane % 16


def acc_col(i, lane, kN):
    return 16 * ((i % (kN // 4)) // 4) + 4 * (lane // 16) + i % 4


def acc_to_matrix(x, kMT, kN):
    """Scatter per-lane accumulators (64, kSize) through row/col; every element exactly once."""
    out, hits = np.zeros((16 * kMT, kN)), np.zeros((16 * kMT, kN), dtype=int)
    for i in range(x.shape[1]):
        out[acc_row(i, LANE, kN), acc_col(i, LANE, kN)] = x[:, i]
        np.add.at(hits, (acc_row(i, LANE, kN), acc_col(i, LANE, kN)), 1)
    assert (hits == 1).all(), "Acc::row/col must cover the tile exactly once"
    return out


def matrix_to_acc(m, kMT, kN):
    return np.stack([m[acc_row(i, LANE, kN), acc_col(i, LANE, kN)] for i in range(kMT * kN // 4)], axis=1)


def lds_image(rows, stride):
    """Row-major [row][d] in LDS with stride-element rows (padding filled with NaN: reading it
    would poison the result)."""
    img = np.full((rows.shape[0], stride), np.nan)
    img[:, : rows.shape[1]] = rows
    return img.reshape(-1)


def warp_gemm_abt(sA, sB, stride, kMT, kN, kD):
    acc = np.zeros((kMT, kN // 16, WAVE, 4))
    a_lane = R * stride + 8 * G
    b_lane = R * stride + 8 * G
    eight = np.arange(8)
    for p in range(kD // 32):
        a = [sA[(a_lane + t * 16 * stride + 32 * p)[:, None] + eight] for t in range(kMT)]
        for nt in range(kN // 16):
            b = sB[(b_lane + nt * 16 * stride + 32 * p)[:, None] + eight]
            for t in range(kMT):
                acc[t, nt] = mfma(b[:, :4], a[t][:, :4], acc[t, nt])  # .xy
                acc[t, nt] = mfma(b[:, 4:], a[t][:, 4:], acc[t, nt])  # .zw
    return np.concatenate([acc[t, nt] for t in range(kMT) for nt in range(kN // 16)], axis=1)


def pack_p(x, kMT, kN, round_to):
    """PFrag b[t][nt]: elements x[t*(kN/4) + nt*4 + 0..3], rounded to the input type."""
    return [[round_to(x[:, t * (kN // 4) + nt * 4: t * (kN // 4) + nt * 4 + 4]) for nt in range(kN // 16)]
            for t in range(kMT)]


def warp_gemm_pv(o, pf, sV, stride, kMT, kN, kD):
    o = o.copy()
    v_lane = 4 * G * stride + R
    for kk in range(kN // 16):
        rows = v_lane + 16 * kk * stride
        for dt in range(kD // 16):
            e = rows + 16 * dt
            a = np.stack([sV[e], sV[e + stride], sV[e + 2 * stride], sV[e + 3 * stride]], axis=1)
            for t in range(kMT):
                sl = slice(t * (kD // 4) + dt * 4, t * (kD // 4) + dt * 4 + 4)
                o[:, sl] = mfma(a, pf[t][kk], o[:, sl])
    return o


def fp16(x):
    return x.astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("kMT, kN, kD", CONFIGS)
def test_warp_gemm_abt_computes_a_bt(kMT, kN, kD):
    rng = np.random.default_rng(kMT * 1000 + kN * 10 + kD)
    stride = kD + SMEM_PAD
    a, b = rng.standard_normal((16 * kMT, kD)), rng.standard_normal((kN, kD))
    s = warp_gemm_abt(lds_image(a, stride), lds_image(b, stride), stride, kMT, kN, kD)
    np.testing.assert_allclose(acc_to_matrix(s, kMT, kN), a @ b.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kMT, kN, kD", PV_CONFIGS)
def test_pack_p_and_warp_gemm_pv_compute_p_v(kMT, kN, kD):
    rng = np.random.default_rng(kMT * 1000 + kN * 10 + kD + 1)
    stride = kD + SMEM_PAD
    p, v = rng.random((16 * kMT, kN)), rng.standard_normal((kN, kD))
    o0 = rng.standard_normal((16 * kMT, kD))  # warp_gemm_pv accumulates into o
    pf = pack_p(matrix_to_acc(p, kMT, kN), kMT, kN, fp16)
    o = warp_gemm_pv(matrix_to_acc(o0, kMT, kD), pf, lds_image(v, stride), stride, kMT, kN, kD)
    np.testing.assert_allclose(acc_to_matrix(o, kMT, kD), o0 + fp16(p) @ v, rtol=1e-12, atol=1e-12)


# bwd_kernel.h's BwdConfig: (head dim, kBlockM); 64 keys per workgroup, one wave per 16 keys.
BWD_KV_CONFIGS = [(32, 64), (64, 64), (96, 32), (128, 32)]


@pytest.mark.parametrize("kD, kBlockM", BWD_KV_CONFIGS)
def test_add_dq_stages_ds_t_and_computes_ds_k(kD, kBlockM):
    # add_dq: each wave stores its 16 keys x kBlockM queries of dS^T to LDS ([key][query]) by
    # Acc::row/col, then reads 16 queries x 64 keys of dS back into an accumulator (Acc::col
    # picks the LDS row, Acc::row the column) and multiplies it by a column slice of K. The LDS
    # image starts as NaN, so a read of anything not stored (or of the padding) shows up.
    block_n, warps = 64, 4
    row_groups = kBlockM // 16
    dq_cols = kD // (warps // row_groups)
    ds_stride, stride = kBlockM + SMEM_PAD, kD + SMEM_PAD
    rng = np.random.default_rng(kD + kBlockM)
    ds, k = rng.standard_normal((kBlockM, block_n)), rng.standard_normal((block_n, kD))
    sdS = np.full(block_n * ds_stride, np.nan)
    for warp in range(warps):
        ds_t = matrix_to_acc(ds.T[16 * warp: 16 * warp + 16], 1, kBlockM)
        for i in range(kBlockM // 4):
            sdS[(16 * warp + acc_row(i, LANE, kBlockM)) * ds_stride + acc_col(i, LANE, kBlockM)] = ds_t[:, i]
    sK = lds_image(k, stride)
    dq, hits = np.zeros((kBlockM, kD)), np.zeros((kBlockM, kD), dtype=int)
    for warp in range(warps):
        row_group, col0 = warp % row_groups, (warp // row_groups) * dq_cols
        ds_acc = np.stack([sdS[acc_col(i, LANE, block_n) * ds_stride + 16 * row_group + acc_row(i, LANE, block_n)]
                           for i in range(block_n // 4)], axis=1)
        dsf = pack_p(ds_acc, 1, block_n, fp16)
        out = warp_gemm_pv(np.zeros((WAVE, dq_cols // 4)), dsf, sK[col0:], stride, 1, block_n, dq_cols)
        for i in range(dq_cols // 4):
            rows, cols = 16 * row_group + acc_row(i, LANE, dq_cols), col0 + acc_col(i, LANE, dq_cols)
            dq[rows, cols] = out[:, i]
            np.add.at(hits, (rows, cols), 1)
    assert (hits == 1).all(), "the waves' (row group, column slice) pairs must tile dQ once"
    np.testing.assert_allclose(dq, fp16(ds) @ k, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kMT, kN", [(2, 32), (2, 64), (1, 64), (2, 128), (1, 32), (1, 48)])
def test_row_statistics_lanes(kMT, kN):
    # A lane's elements of one slot are all in the row slot_row names (the backward's dQ pass
    # relies on it too: lse and D loaded per slot of Acc<1, D> serve Acc<1, kBlockN> by slot(i));
    # the lanes holding a row are exactly an orbit of xor 16 / xor 32 (what row_allreduce_*
    # combine), one of which (lane < 16) owns the row's statistics.
    for i in range(kMT * kN // 4):
        assert (acc_row(i, LANE, kN) == 16 * acc_slot(i, kN) + LANE % 16).all()
    for slot in range(kMT):
        for row in range(16 * slot, 16 * slot + 16):
            holders = {int(l) for l in LANE if any(acc_row(i, l, kN) == row and acc_slot(i, kN) == slot
                                                   for i in range(kMT * kN // 4))}
            lane = min(holders)
            assert holders == {lane, lane ^ 16, lane ^ 32, lane ^ 48}
            assert sum(l < 16 for l in holders) == 1


def bfloat16_round_bits(f):
    """BFloat16::round_bits, on float32 values as uint32 bit patterns."""
    u = np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def test_bfloat16_rounds_to_nearest_even():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000),
                        [0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-40, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8]])
    x = x.astype(np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bfloat16_round_bits(x), want)
    widened = (bfloat16_round_bits(x).astype(np.uint32) << 16).view(np.float32)  # operator float
    np.testing.assert_array_equal(widened, torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    assert np.isnan(torch.from_numpy(bfloat16_round_bits(np.float32(np.nan))[None].view(np.int16))
                    .view(torch.bfloat16).float().numpy()).all()


@pytest.mark.parametrize("kD", [32, 64, 96, 128])
def test_smem_pad_spreads_reads_over_banks(kD):
    # Assumed LDS model (gfx942: 32 banks of 4 bytes; a 16-byte read serves 8 lanes per cycle,
    # a 2-byte read 32 lanes): then warp_gemm_abt's 16-byte reads and warp_gemm_pv's 2-byte reads are
    # conflict-free with kSmemPad, and rows stay 16-byte aligned for the 16-byte copies.
    stride = kD + SMEM_PAD
    assert stride * 2 % 16 == 0
    bank = lambda byte: (byte // 4) % 32
    qk_bytes = 2 * (R * stride + 8 * G)
    for phase in range(8):
        lanes = np.arange(8 * phase, 8 * phase + 8)
        banks = [bank(qk_bytes[l] + 4 * w) for l in lanes for w in range(4)]
        assert len(set(banks)) == 32
    pv_bytes = 2 * (4 * G * stride + R)
    for phase in range(2):
        lanes = np.arange(32 * phase, 32 * phase + 32)
        words = {int(pv_bytes[l] // 4) for l in lanes}  # lanes reading one word share it
        assert len({w % 32 for w in words}) == len(words)
