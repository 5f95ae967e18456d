"""tools/sass/ncu_sass_top.py on a table shaped like Nsight Compute's source-page CSV (no GPU): the header
found past profiler messages, thousands separators read, columns named by a part of their header."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ncu_sass_top", ROOT / "tools" / "sass" / "ncu_sass_top.py")
ncu_sass_top = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_sass_top)

TABLE = '''==PROF== Connected to process 1135
"# Address","Source","Warp Stall Sampling (All Samples)","L1 Wavefronts Shared Excessive"
"00007f0a","STS [R5], R6","1,200","3,072"
"00007f1a","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","9,000","0"
"00007f2a","LDS.64 R8, [R9+0x40]","300",""
'''


def test_reads_past_profiler_lines_and_ranks_a_column():
    header, rows = ncu_sass_top.read_table(TABLE.splitlines())
    assert len(rows) == 3
    stalls = ncu_sass_top.top(header, rows, "warp stall sampling (all", 2)
    assert [(a, v) for a, _, v, _ in stalls] == [("10", 9000.0), ("0", 1200.0)]
    assert stalls[0][3] == pytest.approx(9000 / 10500)


def test_zero_entries_are_left_out_and_a_missing_column_is_none():
    header, rows = ncu_sass_top.read_table(TABLE.splitlines())
    excessive = ncu_sass_top.top(header, rows, "Shared Excessive", 5)
    assert excessive == [("0", "STS [R5], R6", 3072.0, 1.0)]
    assert ncu_sass_top.top(header, rows, "Global Excessive", 5) is None


def test_a_table_without_its_header_is_refused():
    with pytest.raises(ValueError, match="Address"):
        ncu_sass_top.read_table(["==PROF== nothing profiled"])


def test_addresses_and_branch_targets_inside_the_kernel_become_offsets():
    table = [
        '"Address","Source","Warp Stall Sampling (All Samples)"',
        '"0x7f56077d1000","@!P0 BRA 0x7f56077d1020","5"',
        '"0x7f56077d1010","CALL.ABS.NOUNI 0x7f5600000000","3"',
        '"0x7f56077d1020","UMOV UR9, 0x40000040","1"',
    ]
    header, rows = ncu_sass_top.read_table(table)
    stalls = ncu_sass_top.top(header, rows, "Warp Stall", 3)
    assert [(a, sass) for a, sass, _, _ in stalls] == [
        ("0", "@!P0 BRA 0x20"), ("10", "CALL.ABS.NOUNI 0x7f5600000000"), ("20", "UMOV UR9, 0x40000040")]
