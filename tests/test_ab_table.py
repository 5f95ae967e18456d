"""tools/device/ab_table.py (the comparison tools/device/ab_run.sh prints) on fake benchmark results."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ab_table", ROOT / "tools" / "device" / "ab_table.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)

SHAPE = {"B": 8, "H_q": 16, "H_kv": 16, "N": 2048, "D": 64}


def write(out, name, rows, stem="fwd"):
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)  # a variant's folder (or round) holds each benchmark's file
    (folder / f"{stem}_NVIDIA_H200.json").write_text(json.dumps({"gpu": "NVIDIA_H200", "rows": rows}))


def test_forward_variants_side_by_side(tmp_path):
    write(tmp_path, "0-tree", [dict(SHAPE, causal=True, head_first=231.0, sdpa_cudnn=330.0)])
    write(tmp_path, "1-mask", [dict(SHAPE, causal=True, head_first=270.4, sdpa_cudnn=325.0)])
    lines = ab.table(tmp_path).splitlines()
    assert lines[0] == "| bench | shape | causal | 0-tree | / cuDNN | 1-mask | / cuDNN |"
    assert lines[2] == "| fwd | 8x16/16 N=2048 D=64 | yes | 231 | 0.70 | 270 | 0.83 |"


def test_backward_keys_and_missing_results(tmp_path):
    rows = [dict(SHAPE, causal=False, head_first_bwd=150.0, sdpa_cudnn_bwd=None),
            dict(SHAPE, causal=True, head_first_bwd=120.0, sdpa_cudnn_bwd=200.0)]
    write(tmp_path, "0-tree", rows, stem="bwd")
    (tmp_path / "1-broken").mkdir()  # a variant whose build failed wrote no results
    lines = ab.table(tmp_path).splitlines()
    assert lines[2] == "| bwd | 8x16/16 N=2048 D=64 | no | 150 | - | - | - |"
    assert lines[3] == "| bwd | 8x16/16 N=2048 D=64 | yes | 120 | 0.60 | - | - |"


def test_forward_and_backward_of_one_variant(tmp_path):
    write(tmp_path, "0-tree", [dict(SHAPE, causal=True, head_first=231.0, sdpa_cudnn=330.0)])
    write(tmp_path, "0-tree", [dict(SHAPE, causal=True, head_first_bwd=120.0, sdpa_cudnn_bwd=200.0)], stem="bwd")
    lines = ab.table(tmp_path).splitlines()
    assert lines[2:] == ["| bwd | 8x16/16 N=2048 D=64 | yes | 120 | 0.60 |",
                         "| fwd | 8x16/16 N=2048 D=64 | yes | 231 | 0.70 |"]


def test_deterministic_backward_gets_a_row_of_its_own(tmp_path):
    row = dict(SHAPE, causal=True, head_first_bwd=120.0, head_first_det_bwd=90.0, sdpa_cudnn_bwd=200.0)
    write(tmp_path, "0-tree", [row], stem="bwd")
    write(tmp_path, "1-walk", [dict(row, head_first_det_bwd=110.0)], stem="bwd")
    lines = ab.table(tmp_path).splitlines()
    assert lines[2:] == ["| bwd | 8x16/16 N=2048 D=64 | yes | 120 | 0.60 | 120 | 0.60 |",
                         "| bwd-det | 8x16/16 N=2048 D=64 | yes | 90 | 0.45 | 110 | 0.55 |"]


def test_rows_of_other_tools_are_left_out(tmp_path):
    write(tmp_path, "0-tree", [dict(SHAPE, causal=True, head_first=231.0, sdpa_cudnn=330.0)])
    write(tmp_path, "0-tree", [dict(SHAPE, causal=True, call="bwd", kernel="bwd_kv_kernel", us=556.0)],
          stem="kernel")  # tools/probes/kernel_times.py's file: kernel_times_<gpu>.json
    assert ab.table(tmp_path).splitlines()[2:] == ["| fwd | 8x16/16 N=2048 D=64 | yes | 231 | 0.70 |"]


def test_medians_over_rounds_beside_a_variant_of_one_round(tmp_path):
    row = dict(SHAPE, causal=True, head_first=90.0, sdpa_cudnn=100.0)
    for r, (ours, cudnn) in enumerate([(90.0, 100.0), (99.0, 90.0), (96.0, 100.0)]):
        write(tmp_path, f"0-tree/round{r}", [dict(row, head_first=ours, sdpa_cudnn=cudnn)])
    write(tmp_path, "1-flat", [row])
    assert ab.table(tmp_path).splitlines()[2] == (
        "| fwd | 8x16/16 N=2048 D=64 | yes | 96 | 0.96 (0.90-1.10) | 90 | 0.90 |")
