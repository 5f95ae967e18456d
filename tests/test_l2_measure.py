"""tools/l2/l2_measure.py's ncu CSV parsing and tables, on a fake Nsight Compute CSV."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("l2_measure", ROOT / "tools" / "l2" / "l2_measure.py")
l2 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(l2)

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def fake_csv(values):
    """values: per kernel, (hit %, DRAM value, DRAM unit, fabric sectors, time ns[, SM read
    sectors, their lookup hits])."""
    lines = ["==PROF== Connected to process 123", HEADER]
    for i, (hit, dram, unit, fabric, ns, *reads) in enumerate(values):
        common = f'"{i}","123","python","host","void chiplet_fa::fwd_kernel<Cfg>(FwdParams)","1","7",' \
                 f'"(128, 1, 1)","(32768, 1, 1)","0","9.0","Command line profiler metrics"'
        lines += [f'{common},"lts__t_sector_hit_rate.pct","%","{hit}"',
                  f'{common},"dram__bytes_read.sum","{unit}","{dram}"',
                  f'{common},"lts__t_sectors_srcunit_ltcfabric.sum","sector","{fabric}"',
                  f'{common},"gpu__time_duration.sum","nsecond","{ns}"']
        if reads:
            lines += [f'{common},"lts__t_sectors_srcunit_tex_op_read.sum","sector","{reads[0]}"',
                      f'{common},"lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum","sector","{reads[1]}"']
    return "\n".join(lines) + "\n"


def test_parse_units_and_thousand_separators():
    text = fake_csv([(0.21, "550,800,000,000", "byte", "8,620,000,000", "172,000,000"),
                     (98.58, "3.9", "Gbyte", "148000000", "143000000")])
    k = l2.parse_ncu_csv(text)
    assert set(k) == {0, 1}
    assert k[0]["dram__bytes_read.sum"] == pytest.approx(550.8e9)
    assert k[1]["dram__bytes_read.sum"] == pytest.approx(3.9e9)
    assert k[0]["lts__t_sectors_srcunit_ltcfabric.sum"] == pytest.approx(8.62e9)
    assert k[1]["lts__t_sector_hit_rate.pct"] == pytest.approx(98.58)


def test_parse_rejects_output_without_csv_and_unknown_units():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        l2.parse_ncu_csv("==ERR== something failed\n")
    with pytest.raises(ValueError, match="unknown ncu unit"):
        l2.parse_ncu_csv(fake_csv([(1.0, "5", "furlong", "1", "1")]))


def test_from_csv_writes_measured_next_to_predicted(tmp_path):
    points = l2.plan([(*l2.SWEEP[0][:5], False)])  # B=1 H=128 N=8K, four mappings
    values = [(0.2 + i, f"{10 + i}", "Gbyte", "1000", "1000000") for i in range(len(points))]
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(fake_csv(values))
    rc = l2.main(["--quick", "--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", "test"])
    assert rc == 0
    data = json.loads((tmp_path / "l2_test.json").read_text())
    rows = data["rows"]
    assert [r["mapping"] for r in rows] == list(l2.MAPPINGS)
    assert [r["hit_rate"] for r in rows] == pytest.approx([0.2 + i for i in range(4)])
    assert rows[1]["dram_read_bytes"] == pytest.approx(11e9) and rows[1]["time_ms"] == pytest.approx(1.0)
    by = {r["mapping"]: r for r in rows}
    assert by["head_first"]["pred_hit_rate"] > 90 > by["block_first"]["pred_hit_rate"]
    md = (tmp_path / "l2.md").read_text()
    assert "| 1 | 128 | 128 | 8192 | 128 | head_first | 1.20% |" in md
    assert "Command: `python tools/l2/l2_measure.py --quick --from-csv" in md


def test_the_model_columns_name_the_preset_of_the_gpu_measured(tmp_path):
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(fake_csv([(50.0, "1", "Gbyte", "1", "1")] * len(l2.MAPPINGS)))
    for preset in ("h100", "h200"):
        l2.main(["--quick", "--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", preset, "--preset", preset])
        assert f"simulator ({preset} preset)" in (tmp_path / "l2.md").read_text()
        assert json.loads((tmp_path / f"l2_{preset}.json").read_text())["preset"] == preset


def test_missing_kernels_leave_measured_fields_empty(tmp_path):
    points = l2.plan([(*l2.SWEEP[0][:5], False)])
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(fake_csv([(50.0, "1", "Gbyte", "1", "1")]))
    assert l2.main(["--quick", "--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", "t"]) == 1
    rows = json.loads((tmp_path / "l2_t.json").read_text())["rows"]
    assert len(rows) == len(points) and rows[0]["hit_rate"] == 50.0 and rows[1]["hit_rate"] is None
    assert "n/a" in (tmp_path / "l2.md").read_text()


def test_sm_read_rates_leave_out_the_fabric_lookups(tmp_path):
    # block_first-like: every byte the SMs read came from DRAM, though a quarter of all lookups hit
    # (the fabric's); head_first-like: 1% of the SMs' read bytes from DRAM.
    reads = 17_200_000_000  # sectors: 550.4 GB
    values = [(25.35, "550.4", "Gbyte", "1.29e10", "1000000", reads, "860000000"),
              (98.55, "5.504", "Gbyte", "1.96e8", "1000000", reads, reads * 99 // 100)]
    values += [(50.0, "1", "Gbyte", "1", "1")] * 2  # older CSVs: no SM read metrics
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(fake_csv(values))
    assert l2.main(["--quick", "--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", "r"]) == 0
    rows = json.loads((tmp_path / "l2_r.json").read_text())["rows"]
    assert rows[0]["sm_read_hit_rate"] == pytest.approx(5.0)
    assert rows[0]["sm_reads_not_from_dram"] == pytest.approx(0.0, abs=1e-9)
    assert rows[1]["sm_read_hit_rate"] == pytest.approx(99.0)
    assert rows[1]["sm_reads_not_from_dram"] == pytest.approx(99.0)
    assert rows[2]["sm_read_hit_rate"] is None and rows[2]["sm_reads_not_from_dram"] is None
    md = (tmp_path / "l2.md").read_text()
    assert "| block_first | 25.35% | 5.00% | 0.00% |" in md
    assert "| swizzled_block_first | 50.00% | n/a | n/a |" in md


def test_loads_not_from_dram_divide_by_what_the_kernel_loads(tmp_path):
    # The SMs' read sectors can exceed the kernel's loads (block_first's extra quarter); DRAM bytes
    # against the loads' own bytes (the model's trace) give block_first ~0% and head_first ~98%.
    points = l2.plan([(*l2.SWEEP[0][:5], False)])
    load = l2.predict(points[0], 1, 128, "h200")["load_bytes"]  # every mapping loads the same tiles
    assert load == 64 * 128 * (2 * 8192 * 128 * 2) + 128 * 8192 * 128 * 2  # K, V per tile; Q once
    values = [(25.0, str(load * 0.999), "byte", "1", "1"), (97.0, str(load * 0.02), "byte", "1", "1")]
    values += [(50.0, "1", "Gbyte", "1", "1")] * 2
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(fake_csv(values))
    assert l2.main(["--quick", "--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", "l",
                    "--block-n", "128"]) == 0
    rows = json.loads((tmp_path / "l2_l.json").read_text())["rows"]
    assert [r["load_bytes"] for r in rows] == [load] * 4
    assert rows[0]["loads_not_from_dram"] == pytest.approx(0.1)
    assert rows[1]["loads_not_from_dram"] == pytest.approx(98.0)


def test_causal_shapes_and_the_sm_activity_columns(tmp_path):
    """--shapes/--causal/--mappings pick the points; SM active and instructions come from their metrics."""
    argv = ["--shapes", "8,16,16,2048,64,causal", "--causal", "yes", "--mappings", "block_first", "head_first"]
    points = l2.plan([(8, 16, 16, 2048, 64, True)], ["block_first", "head_first"])
    text = fake_csv([(90.0, "1", "Gbyte", "1", "180000", "1000", "900")] * 2).splitlines()
    extra = []
    for i, (active, inst) in enumerate([(870, "5,000,000"), (800, "6,500,000")]):
        common = text[2 + 6 * i].rsplit(',"lts__', 1)[0]
        extra += [f'{common},"sm__cycles_active.avg","cycle","{active}"',
                  f'{common},"sm__cycles_elapsed.avg","cycle","1000"',
                  f'{common},"smsp__inst_executed.sum","inst","{inst}"']
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text("\n".join(text + extra) + "\n")
    assert l2.main(argv + ["--from-csv", str(csv_path), "--out", str(tmp_path), "--tag", "c"]) == 0
    rows = json.loads((tmp_path / "l2_c.json").read_text())["rows"]
    assert [(r["mapping"], r["causal"]) for r in rows] == [(p["mapping"], True) for p in points]
    assert [r["sm_active"] for r in rows] == pytest.approx([87.0, 80.0])
    assert [r["inst_executed"] for r in rows] == pytest.approx([5e6, 6.5e6])
    md = (tmp_path / "l2.md").read_text()
    assert "causal, swizzled" in md and "| 87.00% | 5.0 |" in md and "| 80.00% | 6.5 |" in md
