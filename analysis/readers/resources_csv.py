"""Reads a run's resources.csv (CPU load and NVML samples taken beside the run); empty cells are None."""
from __future__ import annotations

import csv
from pathlib import Path

from profilers.errors import TraceFormatError

RESOURCES_CSV = "resources.csv"
COLUMNS = ("t_s", "cpu_percent", "gpu_util_percent", "gpu_mem_mib", "gpu_power_w")


def read_resources_csv(path: str | Path) -> list[dict]:
    path = Path(path)
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None or "t_s" not in reader.fieldnames:
                raise TraceFormatError(f"{path}: not a gapscope resources.csv (no t_s column)")
            return [{c: float(row[c]) if row.get(c) not in (None, "") else None for c in COLUMNS}
                    for row in reader]
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise TraceFormatError(f"{path}: corrupt resources.csv ({exc})") from None
