"""Reads a run's resources.csv (CPU load and NVML samples taken beside the run); empty cells are None."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from gapscope.profilers.errors import TraceFormatError
from gapscope.analysis.readers import safe_files

RESOURCES_CSV = "resources.csv"
COLUMNS = ("t_s", "cpu_percent", "gpu_util_percent", "gpu_mem_mib", "gpu_power_w")


def read_resources_csv(path: str | Path) -> list[dict]:
    path = Path(path)
    try:
        with io.TextIOWrapper(safe_files.open_regular(path), newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None or "t_s" not in reader.fieldnames:
                raise TraceFormatError(f"{path}: not a gapscope resources.csv (no t_s column)")
            return [{c: _number(row.get(c)) for c in COLUMNS} for row in reader]
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, csv.Error) as exc:  # UnicodeDecodeError is a ValueError
        raise TraceFormatError(f"{path}: corrupt resources.csv ({str(exc)[:160]})") from None


def _number(cell: str | None) -> float | None:
    """A sample, or None for an empty cell; "nan"/"inf" are no sample either (float() takes them)."""
    if cell in (None, ""):
        return None
    value = float(cell)
    return value if math.isfinite(value) else None
