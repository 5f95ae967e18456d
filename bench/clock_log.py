"""The SM clock and power draw over a time window, from `nvidia-smi` sampling in the background:
whether a kernel ran slower because the GPU sat at its power cap (a lower clock) while it ran.

  with ClockLog() as log:
      t0 = time.time(); run(); torch.cuda.synchronize(); t1 = time.time()
  log.window([(t0, t1)])  # (mean SM MHz, mean W, samples), or None without samples

The benchmarks' tables (fwd.py, bwd.py) give each column's mean SM clock over its timed calls
(timing.time_in_turns' windows, then column_clocks).
"""
import os
import subprocess
import tempfile
import time
from datetime import datetime

FIELDS = ("power.draw.instant", "power.draw")  # the instant reading where the driver has it


class ClockLog:
    """gpu: nvidia-smi's -i (an index, bus id or UUID); by default the first of CUDA_VISIBLE_DEVICES,
    else 0: the device the benchmarks run on (with CUDA_DEVICE_ORDER=PCI_BUS_ID where the
    machine has GPUs of several kinds). The samples go to a file, not a pipe: a pipe left unread
    for minutes fills and stops the sampler."""

    def __init__(self, period_ms: int = 20, gpu: str = None):
        self.period_ms = period_ms
        self.gpu = gpu or (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
        self.proc = None
        self.out = None
        self.power = None  # the power field nvidia-smi accepted
        self.rows = []

    def __enter__(self):
        for power in FIELDS:
            cmd = ["nvidia-smi", "-i", self.gpu, f"--query-gpu=timestamp,clocks.sm,{power}",
                   "--format=csv,noheader,nounits", f"-lms={self.period_ms}"]
            self.out = tempfile.TemporaryFile("w+")
            try:
                self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.DEVNULL, text=True)
            except OSError:  # no nvidia-smi
                self.out.close()
                break
            time.sleep(0.3)
            if self.proc.poll() is None:  # still sampling: the field is known
                self.power = power
                return self
            self.out.close()
        self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return
        self.proc.terminate()
        self.proc.wait()
        self.out.seek(0)
        lines = self.out.read().splitlines()
        self.out.close()
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            try:
                t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append((t, float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue

    def window(self, spans):
        """(mean SM clock MHz, mean power W, samples) of the samples inside any of spans ((t0, t1)
        pairs of time.time()), or None without samples."""
        inside = [(mhz, w) for t, mhz, w in self.rows if any(t0 <= t <= t1 for t0, t1 in spans)]
        if not inside:
            return None
        return (sum(m for m, _ in inside) / len(inside), sum(w for _, w in inside) / len(inside), len(inside))

def column_clocks(rows, clocks):
    """Each row's "windows" ({column: [(t0, t1)]}, time_in_turns') replaced by "<column>_mhz": the
    column's mean SM clock over its timed calls, None without samples (no nvidia-smi)."""
    for r in rows:
        for name, windows in r.pop("windows", {}).items():
            clock = clocks.window(windows)
            r[f"{name}_mhz"] = clock[0] if clock else None


def clock_pair(row, ours: str, peer: str) -> str:
    """A table cell: two columns' mean SM clocks, "1755 / 1620" (n/a where a column has none)."""
    cell = lambda key: "n/a" if row.get(f"{key}_mhz") is None else f"{row[f'{key}_mhz']:.0f}"  # noqa: E731
    return f"{cell(ours)} / {cell(peer)}"
