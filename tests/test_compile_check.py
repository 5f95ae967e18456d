"""tools/compile_check.py on tiny translation units: each unit is compiled for the targets of the
kernel family it names (mma_sync: sm_80 and sm_90, sm90: sm_90a, cdna3: gfx942, whose matrix-core
instructions and registers are reported), and it fails loudly on no unit, a unit without a family,
a compile error, or cdna3 code without v_mfma."""
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


def unit(family, matrix_op):
    return f"#define CFA_FAMILY_{family} 1\n" + KERNEL.replace("MATRIX_OP", matrix_op)


MFMA = "__builtin_amdgcn_mfma_f32_32x32x8f16(x, x, acc, 0, 0, 0)"
PLAIN = "acc + (float)x[0]"


def compile_check(tmp_path, sources, *options):
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    return subprocess.run([sys.executable, str(TOOL), *options, str(tmp_path / "*.cu")], capture_output=True,
                          text=True, timeout=300)


def row(done, name):
    """The cells of the unit's row: sm_80, sm_90, sm_90a, gfx942, v_mfma, vgpr, agpr, scratch."""
    return next(line for line in done.stdout.splitlines() if line.split()[0].endswith("/" + name)).split()[1:]


def test_cdna3_unit_compiles_for_gfx942_and_counts_mfma(tmp_path):
    done = compile_check(tmp_path, {"fwd_a.cu": unit("CDNA3", MFMA)})
    assert done.returncode == 0, done.stdout + done.stderr
    cells = row(done, "fwd_a.cu")
    assert cells[:5] == ["-", "-", "-", "ok", "1"]
    vgpr, agpr, scratch = map(int, cells[5:])
    # The MFMA's 16-float accumulator alone needs 16 registers (VGPRs or AGPRs on gfx942).
    assert vgpr + agpr >= 16 and scratch == 0


def test_nvidia_units_compile_for_their_family_targets(tmp_path):
    done = compile_check(tmp_path, {"fwd_m.cu": unit("MMA_SYNC", PLAIN), "fwd_w.cu": unit("SM90", PLAIN)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert row(done, "fwd_m.cu")[:5] == ["ok", "ok", "-", "-", "-"]
    assert row(done, "fwd_w.cu")[:5] == ["-", "-", "ok", "-", "-"]


def test_fails_without_mfma_or_on_a_compile_error(tmp_path):
    done = compile_check(tmp_path, {"fwd_plain.cu": unit("CDNA3", PLAIN),
                                    "fwd_bad.cu": "#define CFA_FAMILY_MMA_SYNC 1\nnot C++\n"})
    assert done.returncode == 1
    assert "fwd_plain.cu [gfx942]: no v_mfma" in done.stderr
    assert "fwd_bad.cu [sm_80]" in done.stderr and "fwd_bad.cu [sm_90]" in done.stderr


def test_define_reaches_every_compile(tmp_path):
    # Compiles only with the macro (CI's traced units: --define CFA_TRACE=1).
    sources = {"fwd_m.cu": "#ifndef WANTED\n#error WANTED not defined\n#endif\n" + unit("MMA_SYNC", PLAIN),
               "fwd_a.cu": "#ifndef WANTED\n#error WANTED not defined\n#endif\n" + unit("CDNA3", MFMA)}
    assert compile_check(tmp_path, sources).returncode == 1
    done = compile_check(tmp_path, sources, "--define", "WANTED=1")
    assert done.returncode == 0, done.stdout + done.stderr


def test_fails_on_a_unit_without_a_family(tmp_path):
    done = compile_check(tmp_path, {"fwd_x.cu": KERNEL.replace("MATRIX_OP", PLAIN)})
    assert done.returncode == 1 and "fwd_x.cu: names no kernel family" in done.stderr


def test_fails_when_no_translation_unit_matches(tmp_path):
    done = compile_check(tmp_path, {})
    assert done.returncode == 1 and "no translation unit" in done.stderr
