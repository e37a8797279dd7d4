"""Background sampling of CPU load (psutil) and NVIDIA GPU utilisation, memory and power (NVML)."""
from __future__ import annotations

import csv
import statistics
import threading
import time
from pathlib import Path

import psutil

from gapscope.profilers.nvml import nvml

RESOURCES_CSV = "resources.csv"
COLUMNS = ("t_s", "cpu_percent", "gpu_util_percent", "gpu_mem_mib", "gpu_power_w")


class ResourceSampler:
    """Samples every `interval_s` in a daemon thread while the run executes.

    A thread rather than a process: sampling costs a few syscalls per interval, and NVML
    handles are per process. Energy is the power integrated over the samples."""

    def __init__(self, interval_s: float = 0.1, gpu_index: int = 0):
        self.interval_s = interval_s
        self.samples: list[tuple] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gapscope-sampler", daemon=True)
        lib = nvml()
        self._nvml = lib
        self._gpu = lib.nvmlDeviceGetHandleByIndex(gpu_index) if lib and lib.nvmlDeviceGetCount() else None
        self._process = psutil.Process()

    def __enter__(self):
        psutil.cpu_percent(None)  # the first call only starts psutil's interval
        self._start = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((time.perf_counter() - self._start, psutil.cpu_percent(None),
                                 *self._gpu_sample()))

    def _gpu_sample(self) -> tuple:
        if self._gpu is None:
            return (None, None, None)
        lib = self._nvml
        util = lib.nvmlDeviceGetUtilizationRates(self._gpu)
        memory = lib.nvmlDeviceGetMemoryInfo(self._gpu)
        power_w = lib.nvmlDeviceGetPowerUsage(self._gpu) / 1000.0
        return (float(util.gpu), memory.used / 2**20, power_w)

    def write_csv(self, run_dir: Path) -> Path:
        path = run_dir / RESOURCES_CSV
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            for sample in self.samples:
                writer.writerow(["" if v is None else round(v, 3) for v in sample])
        return path

    def summary(self) -> dict:
        """Means over the run and GPU energy; None where a figure was not available."""
        def mean(i):
            values = [s[i] for s in self.samples if s[i] is not None]
            return round(statistics.fmean(values), 2) if values else None
        powers = [(s[0], s[4]) for s in self.samples if s[4] is not None]
        energy = sum((t1 - t0) * p0 for (t0, p0), (t1, _) in zip(powers, powers[1:])) if len(powers) > 1 else None
        return {"cpu_load_percent": mean(1), "gpu_util_percent": mean(2), "gpu_mem_mib": mean(3),
                "gpu_power_w": mean(4), "gpu_energy_j": None if energy is None else round(energy, 2),
                "samples": len(self.samples)}
