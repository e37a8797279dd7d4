"""Checks the rows of steps.csv as the trace readers check events: a row that is no measurement is dropped and counted, a file mostly of them is refused."""
from __future__ import annotations

import math
import re
from collections import Counter

from gapscope.analysis.readers.validate import MAX_DROPPED_SHARE
from gapscope.profilers.errors import TraceFormatError
from gapscope.profilers.phases import MARKED_PHASES

# A step over a day is no measurement (as validate.MAX_DUR_US for trace events).
MAX_STEP_MS = 86_400e3
# Phases are written rounded to the µs, each, so four of them may pass the step by 4 µs.
PHASE_SLACK_MS = 0.005
_STEP_NUMBER = re.compile(r"[0-9]{1,18}")
_FLAGS = ("warmup", "traced")

SHORT_ROW = "short row"
LONG_ROW = "more cells than columns"
BAD_STEP = "unreadable step number"
NOT_A_NUMBER = "cell not a number"
NO_STEP_TIME = "no step_ms"
NOT_FINITE = "non-finite time"
NEGATIVE = "negative time"
ZERO_STEP = "zero-length step"
ABSURD = "time over a day"
PHASE_OVER_STEP = "phases over the step"
DUPLICATE_STEP = "duplicate step"
BAD_FLAG = "warmup/traced not 0 or 1"
BAD_FAULTS = "page-fault count negative or not finite"


def checked_rows(path, raw_rows) -> tuple[list[dict], Counter]:
    """The valid rows of csv.DictReader rows, numbers parsed (an empty phase cell, a phase not
    timed, is None), and the count of rows dropped by why. Raises when more than half the rows
    are invalid: what is left would be numbers about something else."""
    rows, dropped, seen = [], Counter(), set()
    for raw in raw_rows:
        row, problem = _row(raw)
        if problem is None and row["step"] in seen:
            problem = DUPLICATE_STEP
        if problem:
            dropped[problem] += 1
            continue
        seen.add(row["step"])
        rows.append(row)
    bad = sum(dropped.values())
    if bad and (not rows or bad > MAX_DROPPED_SHARE * (len(rows) + bad)):
        raise TraceFormatError(f"{path}: {bad:,} of {len(rows) + bad:,} rows are invalid "
                               f"({describe(dropped)}): refusing steps.csv")
    return rows, dropped


def describe(dropped: Counter) -> str:
    return ", ".join(f"{n:,} {why}" for why, n in dropped.most_common())


def _row(raw: dict) -> tuple[dict | None, str | None]:
    if None in raw:  # csv.DictReader's key for cells past the header
        return None, LONG_ROW
    if any(value is None for value in raw.values()):
        return None, SHORT_ROW
    step = raw.get("step", "").strip()
    if not _STEP_NUMBER.fullmatch(step):
        return None, BAD_STEP
    row = {"step": int(step)}
    for key, text in raw.items():
        if key == "step":
            continue
        try:
            row[key] = _number(text)
        except ValueError:
            return None, NOT_A_NUMBER
    if row.get("step_ms") is None:
        return None, NO_STEP_TIME
    for flag in _FLAGS:
        if row.get(flag) not in (None, 0, 1):
            return None, BAD_FLAG
    faults = row.get("minor_faults")
    if faults is not None and not (math.isfinite(faults) and faults >= 0):
        return None, BAD_FAULTS
    if isinstance(row.get("loss"), float) and not math.isfinite(row["loss"]):
        row["loss"] = None  # a diverged loss is a fact about training, not a bad row
    times = [row["step_ms"]] + [row.get(f"{p}_ms") for p in MARKED_PHASES]
    problem = _times_problem([t for t in times if t is not None])
    if problem:
        return None, problem
    if row["step_ms"] == 0:
        return None, ZERO_STEP
    phases = [row.get(f"{p}_ms") or 0.0 for p in MARKED_PHASES]
    if sum(phases) > row["step_ms"] + PHASE_SLACK_MS:
        return None, PHASE_OVER_STEP
    return row, None


def _times_problem(times: list) -> str | None:
    for t in times:
        if not math.isfinite(t):
            return NOT_FINITE
        if t < 0:
            return NEGATIVE
        if t > MAX_STEP_MS:
            return ABSURD
    return None


def _number(text: str) -> float | int | None:
    text = text.strip()
    if text == "":
        return None
    if len(text) > 40:  # a number gapscope writes has a few digits; int() of 5,000 raises late
        raise ValueError(text[:40])
    number = float(text)
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() \
        else number


def steady(rows: list[dict], warmup_steps: int) -> list[dict]:
    """Rows of steps numbered from `warmup_steps` on: by step number, not position, so a row
    dropped before them does not move a warm-up step into the steady state."""
    return [r for r in rows if r["step"] >= warmup_steps]


def warm_up(rows: list[dict], warmup_steps: int) -> list[dict]:
    return [r for r in rows if r["step"] < warmup_steps]


def warmup_from_rows(rows: list[dict]) -> int | None:
    """The warm-up steps.csv itself records (its `warmup` column): the step after the last one
    flagged. None when the file has no such column (a foreign or older file)."""
    if not rows or any(r.get("warmup") is None for r in rows):
        return None
    return max((r["step"] + 1 for r in rows if r["warmup"]), default=0)
