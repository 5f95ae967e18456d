"""tools/compile_check.py on tiny translation units: it must pass a TU that compiles everywhere
and uses the matrix cores (reporting its registers), skip HIP for head dims whose tiles exceed
gfx942's LDS, and fail loudly on no TU, a compile error, or no v_mfma."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "compile_check.py"
pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("nvcc", "clang-19", "llvm-mc-19", "llvm-objdump-19")),
    reason="needs nvcc, clang-19, llvm-mc-19 and llvm-objdump-19")

# One matrix-core instruction on gfx942; plain code for nvcc.
KERNEL = r"""
#if defined(__HIP_DEVICE_COMPILE__)
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
#endif
extern "C" __global__ void scale(float* out, const float* in) {
#if defined(__HIP_DEVICE_COMPILE__)
  half4 x = {(_Float16)in[0], (_Float16)in[1], (_Float16)in[2], (_Float16)in[3]};
  float16v acc = {};
  acc = MATRIX_OP;
  out[0] = acc[0];
#else
  out[0] = in[0] * 2.f;
#endif
}
"""


def compile_check(tmp_path, sources):
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    return subprocess.run([sys.executable, str(TOOL), str(tmp_path / "*.cu")], capture_output=True,
                          text=True, timeout=300)


def test_passes_and_counts_mfma(tmp_path):
    mfma = KERNEL.replace("MATRIX_OP", "__builtin_amdgcn_mfma_f32_32x32x8f16(x, x, acc, 0, 0, 0)")
    done = compile_check(tmp_path, {"fwd_a.cu": mfma})
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("fwd_a.cu")).split()
    # sm_80, sm_90, sm_90a (wgmma build), gfx942, then the v_mfma count
    assert row[:6] == ["fwd_a.cu", "ok", "ok", "ok", "ok", "1"]
    vgpr, agpr, scratch = map(int, row[6:])
    # The MFMA's 16-float accumulator alone needs 16 registers (VGPRs or AGPRs on gfx942).
    assert vgpr + agpr >= 16 and scratch == 0


def test_skips_hip_for_head_dims_beyond_lds(tmp_path):
    # No v_mfma in it: compiled for gfx942 it would fail, so passing shows the HIP step was skipped.
    plain = KERNEL.replace("MATRIX_OP", "acc + (float)x[0]")
    done = compile_check(tmp_path, {"fwd_bf16_hdim256_full.cu": plain})
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("fwd_bf16_hdim256_full.cu"))
    assert row.split()[1:5] == ["ok", "ok", "ok", "skipped"]
    assert "[gfx942] skipped: head dim 256 > 128" in done.stdout and "1 skipped" in done.stdout


def test_compiles_the_backward_for_hip(tmp_path):
    # Without v_mfma the gfx942 step fails, which shows the backward is compiled there too.
    plain = KERNEL.replace("MATRIX_OP", "acc + (float)x[0]")
    done = compile_check(tmp_path, {"bwd_bf16_hdim64_full.cu": plain})
    assert done.returncode == 1 and "bwd_bf16_hdim64_full.cu [gfx942]: no v_mfma" in done.stderr


def test_fails_without_mfma_or_on_a_compile_error(tmp_path):
    no_mfma = KERNEL.replace("MATRIX_OP", "acc + (float)x[0]")
    done = compile_check(tmp_path, {"fwd_plain.cu": no_mfma, "fwd_bad.cu": "not C++\n"})
    assert done.returncode == 1
    assert "fwd_plain.cu [gfx942]: no v_mfma" in done.stderr
    assert "fwd_bad.cu [sm_80]" in done.stderr and "fwd_bad.cu [gfx942]" in done.stderr


def test_fails_when_no_translation_unit_matches(tmp_path):
    done = compile_check(tmp_path, {})
    assert done.returncode == 1 and "no translation unit" in done.stderr
