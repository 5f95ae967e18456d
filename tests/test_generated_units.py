"""The committed kernel instantiation units and dispatch tables are what their generator writes."""
import subprocess
import sys
from pathlib import Path

GENERATOR = Path(__file__).resolve().parents[1] / "csrc" / "kernels" / "generate_kernels.py"


def test_committed_units_match_the_generator():
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, f"run python {GENERATOR.name} and commit its output:\n{done.stdout}{done.stderr}"


def test_the_check_sees_a_changed_unit(tmp_path, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("generate_kernels", GENERATOR)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    files = gen.generated()
    monkeypatch.setattr(gen, "OUT", tmp_path)
    gen.write(files)
    assert gen.differences(files) == []
    first = sorted(files)[0]
    (tmp_path / first).write_text("// edited by hand\n")
    (tmp_path / "sm90" / "extra.cu").write_text("")
    assert gen.differences(files) == ["not generated: sm90/extra.cu", f"differs: {first}"]
