"""XCD detection rule (csrc/topology.cpp) on fake KFD sysfs trees and fake device properties."""
import pytest

from chiplet_fa.locality import detect_xcds, detect_xcds_rocm


def kfd_tree(tmp_path, nodes):
    """nodes: list of property dicts, one per KFD node (node i -> nodes/i/properties)."""
    for i, props in enumerate(nodes):
        d = tmp_path / "nodes" / str(i)
        d.mkdir(parents=True)
        (d / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))
    return str(tmp_path)


CPU_NODE = {"cpu_cores_count": 96, "simd_count": 0}
MI300X = {"simd_count": 1216, "simd_per_cu": 4, "gfx_target_version": 90402, "num_xcc": 8}


def without(props, key):
    return {k: v for k, v in props.items() if k != key}


def test_num_xcc_wins(tmp_path):
    root = kfd_tree(tmp_path, [CPU_NODE, MI300X])
    n, source, assumed = detect_xcds_rocm(root, 0)
    assert (n, assumed) == (8, False) and "num_xcc" in source and "node 1" in source


def test_cpx_partition_reports_one(tmp_path):
    cpx = dict(MI300X, simd_count=152, num_xcc=1)
    assert detect_xcds_rocm(kfd_tree(tmp_path, [CPU_NODE, cpx]), 0).num_xcds == 1


@pytest.mark.parametrize("simd, target, expected", [(1216, 90402, 8), (152, 90402, 1), (608, 90402, 4),
                                                     (1024, 90500, 8), (440, 90010, 1)])
def test_cu_count_over_cus_per_xcd(tmp_path, simd, target, expected):
    node = {"simd_count": simd, "simd_per_cu": 4, "gfx_target_version": target}
    n, source, _ = detect_xcds_rocm(kfd_tree(tmp_path, [CPU_NODE, node]), 0)
    assert n == expected
    assert ("CUs per XCD" in source) == (target != 90010)


def test_cu_count_that_is_not_whole_xcds_is_an_error(tmp_path):
    mi308x = {"simd_count": 320, "simd_per_cu": 4, "gfx_target_version": 90402}  # 80 CUs, 20 per XCD
    with pytest.raises(RuntimeError, match="CHIPLET_FA_NUM_XCDS"):
        detect_xcds_rocm(kfd_tree(tmp_path, [CPU_NODE, mi308x]), 0)


def test_device_index_and_visible_devices(tmp_path):
    root = kfd_tree(tmp_path, [CPU_NODE, MI300X, dict(MI300X, num_xcc=2), CPU_NODE])
    assert detect_xcds_rocm(root, 1).num_xcds == 2
    assert detect_xcds_rocm(root, 0, visible_devices="1").num_xcds == 2
    # Unparseable list (UUIDs) with disagreeing nodes: no rule applies.
    assert detect_xcds_rocm(root, 0, visible_devices="GPU-abc").assumed
    same = kfd_tree(tmp_path / "same", [MI300X, MI300X])
    assert detect_xcds_rocm(same, 0, visible_devices="GPU-abc").num_xcds == 8


def test_env_override(tmp_path):
    root = kfd_tree(tmp_path, [MI300X])
    assert detect_xcds_rocm(root, 0, env_override="4") == (4, "environment CHIPLET_FA_NUM_XCDS", False)
    for bad in ("0", "-2", "eight", "", "4097", "99999999"):
        with pytest.raises(ValueError, match=r"CHIPLET_FA_NUM_XCDS must be an integer in 1\.\.4096"):
            detect_xcds_rocm(root, 0, env_override=bad)


def test_device_properties_fallback_and_assumption(tmp_path):
    empty = str(tmp_path / "missing")
    assert detect_xcds_rocm(empty, 0, cu_count=304, arch="gfx942:sramecc+:xnack-").num_xcds == 8
    assert detect_xcds_rocm(empty, 0, cu_count=256, arch="gfx950").num_xcds == 8
    n, source, assumed = detect_xcds_rocm(empty, 0)
    assert (n, assumed) == (1, True) and "CHIPLET_FA_NUM_XCDS" in source
    # sysfs node without num_xcc or a target version falls through to the properties.
    root = kfd_tree(tmp_path / "partial", [without(without(MI300X, "num_xcc"), "gfx_target_version")])
    assert detect_xcds_rocm(root, 0, cu_count=228, arch="gfx942").num_xcds == 6


def test_cpu_is_one_domain_even_with_the_override(monkeypatch):
    monkeypatch.setenv("CHIPLET_FA_NUM_XCDS", "8")
    assert detect_xcds("cpu") == (1, "CPU: one domain", False)
