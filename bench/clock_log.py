"""The SM clock and power draw over a time window, from `nvidia-smi` sampling in the background:
whether a kernel ran slower because the GPU sat at its power cap (a lower clock) while it ran.

  with ClockLog() as log:
      t0 = time.time(); run(); torch.cuda.synchronize(); t1 = time.time()
  log.window(t0, t1)  # (mean SM MHz, mean W, samples), or None without samples
"""
import subprocess
import time
from datetime import datetime

FIELDS = ("power.draw.instant", "power.draw")  # the instant reading where the driver has it


class ClockLog:
    def __init__(self, period_ms: int = 20):
        self.period_ms = period_ms
        self.proc = None
        self.power = None  # the power field nvidia-smi accepted
        self.rows = []

    def __enter__(self):
        for power in FIELDS:
            cmd = ["nvidia-smi", f"--query-gpu=timestamp,clocks.sm,{power}", "--format=csv,noheader,nounits",
                   f"-lms={self.period_ms}"]
            try:
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except OSError:
                return self
            time.sleep(0.3)
            if self.proc.poll() is None:  # still sampling: the field is known
                self.power = power
                return self
            self.proc.communicate()
        self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate()
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append((t, float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue

    def window(self, t0: float, t1: float):
        """(mean SM clock MHz, mean power W, samples) of the samples in [t0, t1] (time.time()), or None."""
        inside = [(mhz, w) for t, mhz, w in self.rows if t0 <= t <= t1]
        if not inside:
            return None
        return (sum(m for m, _ in inside) / len(inside), sum(w for _, w in inside) / len(inside), len(inside))
