"""tools/sass/sass_diff.py's parsing of ptxas and cuobjdump output (the compiles themselves need nvcc
and cuobjdump): what counts as the same SASS, and whose spills a row reports."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("sass_diff", ROOT / "tools" / "sass" / "sass_diff.py")
sass_diff = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_diff)

KV = "_ZN10chiplet_fa4sm9018bwd_kv_kernel_sm90ILNS_5DTypeE1ELi128ELb0ELNS0_6DqModeE1ELb1EEEvNS0_12TmaBwdParamsE"
PRE = "_ZN10chiplet_fa4sm9021bwd_preprocess_kernelI13__nv_bfloat16EEvNS_9BwdParamsE"

PTXAS = f"""ptxas info    : Compiling entry function '{KV}' for 'sm_90a'
ptxas info    : Function properties for {KV}
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers, 8 bytes cumulative stack size
ptxas info    : Compiling entry function '{PRE}' for 'sm_90a'
ptxas info    : Function properties for {PRE}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 36 registers, used 0 barriers
ptxas info    : (C7519) warpgroup.arrive is injected in around line 13963 by compiler to allow use of registers in GMMA in function '{KV}'
"""


def sass(function, *lines):
    body = "\n".join(f"        /*{16 * i:04x}*/                   {ins} ;   /* 0x000fe40000000f00 */"
                     for i, ins in enumerate(lines))
    return f"\n\tcode for sm_90a\n\t\tFunction : {function}\n\t.headerflags\t@\"EF_CUDA_SM90\"\n{body}\n"


def test_ptxas_spills_registers_and_wgmma_messages_per_entry():
    assert sass_diff.parse_ptxas(PTXAS) == {KV: (168, 4, 12, 1), PRE: (36, 0, 0, 0)}


def test_sass_ignores_addresses_and_immediates_but_not_registers():
    a = sass_diff.parse_sass(sass(KV, "MOV R1, c[0x0][0x28]", "@P0 BRA 0x1a0", "FFMA R2, R3, R4, R5"))
    moved = sass_diff.parse_sass(sass(KV, "MOV R1, c[0x0][0x30]", "@P0 BRA 0x2b0", "FFMA R2, R3, R4, R5"))
    renamed = sass_diff.parse_sass(sass(KV, "MOV R1, c[0x0][0x28]", "@P0 BRA 0x1a0", "FFMA R2, R3, R5, R4"))
    assert a[KV] == ["MOV R1, c[#][#]", "@P0 BRA #", "FFMA R2, R3, R4, R5"]
    assert a == moved
    assert a != renamed


def test_rows_say_same_differs_and_count_opcodes():
    base = sass_diff.parse_ptxas(PTXAS), sass_diff.parse_sass(sass(KV, "MOV R1, R2", "IADD3 R1, R1, 0x1, RZ") +
                                                               sass(PRE, "EXIT"))
    new = sass_diff.parse_ptxas(PTXAS.replace("4 bytes spill stores", "8 bytes spill stores")), \
        sass_diff.parse_sass(sass(KV, "MOV R1, R2", "@!P1 IADD3 R1, R1, 0x1, RZ", "IADD3.X R3, R3, 0x1, RZ") +
                             sass(PRE, "EXIT"))
    rows = {r[1]: r for r in sass_diff.rows("sm90/unit", base, new)}
    assert rows[KV][2:5] == (2, 3, "differs")
    assert rows[KV][5:7] == ((168, 4, 12, 1), (168, 8, 12, 1))
    assert rows[KV][7] == "IADD3 +1"  # predicates and modifiers fold into the opcode
    assert rows[PRE][2:5] == (1, 1, "same")


def test_short_names_the_kernel_and_its_template_arguments():
    assert sass_diff.short(KV) == "bwd_kv_kernel_sm90<1, 128, 0, 1, 1>"
    assert sass_diff.short(PRE) == "bwd_preprocess_kernel<__nv_bfloat16>"
    assert sass_diff.short(PRE.replace("13__nv_bfloat16", "6__half")) == "bwd_preprocess_kernel<__half>"
    assert sass_diff.short("_ZN10chiplet_fa4sm9020block_offsets_kernelEPKiiliiPib") == "block_offsets_kernel"
