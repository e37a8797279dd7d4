"""What else the machine did while a run ran: other processes' CPU, steal and CPU pressure."""
from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

_PRESSURE = Path("/proc/pressure/cpu")


def load_snapshot() -> dict:
    """The machine's counters now: two snapshots give the load between them (load_between)."""
    times = psutil.cpu_times()
    me = psutil.Process()
    own = me.cpu_times()
    # This process, the children it waited for, and the live ones (DataLoader workers) are
    # the run's own work; everything else on the machine is someone else's.
    own_s = own.user + own.system + own.children_user + own.children_system
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            own_s += t.user + t.system
        except psutil.Error:
            pass
    total = sum(getattr(times, f, 0.0) for f in
                ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"))
    return {"t": time.monotonic(), "total_s": total,
            "idle_s": times.idle + getattr(times, "iowait", 0.0),
            "steal_s": getattr(times, "steal", 0.0), "own_s": own_s,
            "pressure_us": _pressure_total_us(), "loadavg_1m": os.getloadavg()[0]}


def load_between(before: dict, after: dict) -> dict:
    """Shares of the machine (all cores, in %) between two snapshots: `others_cpu_pct` the CPU
    used by other processes, `steal_pct` the time the hypervisor gave to other guests, and
    `cpu_pressure_pct` the time some runnable task here waited for a core (PSI)."""
    wall = max(after["t"] - before["t"], 1e-9)
    total = max(after["total_s"] - before["total_s"], 1e-9)
    busy = total - (after["idle_s"] - before["idle_s"]) - (after["steal_s"] - before["steal_s"])
    others = max(busy - (after["own_s"] - before["own_s"]), 0.0)
    pressure = (None if before["pressure_us"] is None or after["pressure_us"] is None
                else round(100 * (after["pressure_us"] - before["pressure_us"]) / 1e6 / wall, 1))
    return {"others_cpu_pct": round(100 * others / total, 1),
            "steal_pct": round(100 * (after["steal_s"] - before["steal_s"]) / total, 1),
            "cpu_pressure_pct": pressure,
            "loadavg_1m": [round(before["loadavg_1m"], 2), round(after["loadavg_1m"], 2)],
            "cores": psutil.cpu_count(), "seconds": round(wall, 1)}


class MachineLoad:
    """Snapshots on enter and exit; `summary` is load_between them. No thread: a sampler
    competing for the cores would be part of the load it measures."""

    def __enter__(self) -> "MachineLoad":
        self._before = load_snapshot()
        self.summary: dict | None = None
        return self

    def __exit__(self, *exc_info) -> bool:
        self.summary = load_between(self._before, load_snapshot())
        return False


def _pressure_total_us() -> int | None:
    """/proc/pressure/cpu's `some ... total=` (µs with a task waiting for a core); None where
    the kernel has no PSI."""
    try:
        for line in _PRESSURE.read_text().splitlines():
            if line.startswith("some"):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
