"""Resource use over a run from its samples: CPU load, and GPU utilisation, memory and power where NVML was there."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

NOT_AVAILABLE = "n/a"


@dataclass
class ResourceStats:
    samples: int
    cpu_percent_mean: float | None = None
    cpu_percent_max: float | None = None
    gpu_util_percent_mean: float | None = None
    gpu_mem_mib_max: float | None = None
    gpu_power_w_mean: float | None = None
    note: str | None = None

    def to_json_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def resource_stats(rows: list[dict] | None) -> ResourceStats:
    """`rows` from resources.csv, or None when the run has no such file."""
    if not rows:
        return ResourceStats(0, note=f"{NOT_AVAILABLE}: no resources.csv in the run directory")

    def values(column):
        return [r[column] for r in rows if r.get(column) is not None]

    cpu, util, mem, power = (values(c) for c in ("cpu_percent", "gpu_util_percent",
                                                  "gpu_mem_mib", "gpu_power_w"))
    return ResourceStats(
        samples=len(rows),
        cpu_percent_mean=statistics.fmean(cpu) if cpu else None,
        cpu_percent_max=max(cpu) if cpu else None,
        gpu_util_percent_mean=statistics.fmean(util) if util else None,
        gpu_mem_mib_max=max(mem) if mem else None,
        gpu_power_w_mean=statistics.fmean(power) if power else None,
        # The sampler covers the whole run, warm-up included, not only the traced steps.
        note=None if util else "GPU figures n/a (no NVML samples: CPU-only run or no driver)")
