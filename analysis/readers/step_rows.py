"""Checks the rows of steps.csv as the trace readers check events: a row that is no measurement is dropped and counted, a file mostly of them is refused."""
from __future__ import annotations

import math
import re
from collections import Counter
from itertools import compress, repeat

import numpy as np

from gapscope.analysis.readers.validate import MAX_DROPPED_SHARE
from gapscope.profilers.errors import TraceFormatError
from gapscope.profilers.phases import MARKED_PHASES

# A step over a day is no measurement (as validate.MAX_DUR_US for trace events).
MAX_STEP_MS = 86_400e3
# Phases are written rounded to the µs, each, so four of them may pass the step by 4 µs.
PHASE_SLACK_MS = 0.005
_STEP_NUMBER = re.compile(r"[0-9]{1,18}")
_FLAGS = ("warmup", "traced")
_SPACE = re.compile(r"\s")
_OTHER_THAN_POINT = re.compile(r"[eEnNiI]")  # exponents, nan, inf: _number reads them cell by cell

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
PARTIAL_LINE = "partial last line (the run was killed while writing it)"


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


def checked_table(path, header: list[str], cells: list[list[str]]) -> tuple[StepRows, Counter]:
    """checked_rows of csv.reader rows under `header`, blank lines skipped as csv.DictReader
    does. A file whose every row is a clean measurement (what gapscope writes) is checked and
    parsed a column at a time, so 100k rows cost little more than reading them; any other is
    read row by row, each row's first problem counted."""
    cells = [row for row in cells if row]
    rows = _clean_rows(header, cells)
    if rows is not None:
        return rows, Counter()
    rows, dropped = checked_rows(path, (as_dict(header, row) for row in cells))
    return StepRows(rows), dropped


def as_dict(header: list[str], cells: list[str]) -> dict:
    """A row as csv.DictReader gives it: cells past the header under None, missing ones None."""
    row = dict(zip(header, cells))
    if len(cells) > len(header):
        row[None] = cells[len(header):]
    for key in header[len(cells):]:
        row[key] = None
    return row


def plain_table(text: str) -> StepRows | None:
    """The rows of a whole steps.csv as gapscope writes it (no quotes, no blank or partial
    line, every line as wide as the header), parsed as checked_table parses them; None for any
    other file, which checked_table reads. Without quotes each comma parts two cells, so the
    cells are split in one pass rather than csv's, line by line (a third of reading 100k rows)."""
    text = text.replace("\r\n", "\n")  # csv.writer's line end
    if '"' in text or "\r" in text or not text.endswith("\n"):
        return None
    lines = text.split("\n")
    header, lines = lines[0].split(","), lines[1:-1]
    commas = len(header) - 1
    if any(count != commas for count in map(str.count, lines, repeat(","))):
        return None
    cells = ",".join(lines).split(",")
    return _clean_columns(header, {key: cells[i::len(header)] for i, key in enumerate(header)},
                          len(lines))


def _clean_rows(header: list[str], cells: list[list[str]]) -> list[dict] | None:
    """The parsed rows when every row passes every check of _row and no step repeats, else
    None (the row-by-row path then says which rows fail, and why)."""
    if any(len(row) != len(header) for row in cells):
        return None
    return _clean_columns(header, dict(zip(header, zip(*cells))), len(cells))


def _clean_columns(header: list[str], columns: dict[str, list[str]], count: int) -> StepRows | None:
    """_clean_rows of the cells a column at a time, `count` rows."""
    if not count or len(set(header)) != len(header) or not {"step", "step_ms"} <= set(header):
        return None
    try:
        parsed = {key: _column(texts, loss=key == "loss") for key, texts in columns.items()}
    except ValueError:
        return None
    steps = columns["step"]
    written = "".join(steps)
    if not (written.isascii() and written.isdigit() and max(map(len, steps)) <= 18
            and "" not in steps) \
            or None in parsed["step_ms"] or len(set(parsed["step"])) != count:
        return None
    checked = [key for key in header if key in (*_FLAGS, "minor_faults", "step_ms")
               or key.removesuffix("_ms") in MARKED_PHASES]
    numbers = {key: _floats(parsed[key]) for key in checked}
    given = {key: numbers[key] if "" not in columns[key] else
             numbers[key][np.fromiter((t != "" for t in columns[key]), bool, count)]
             for key in checked}  # the cells written, "nan" among them
    if any(not np.isin(given[flag], (0, 1)).all() for flag in _FLAGS if flag in given):
        return None
    if "minor_faults" in given and not (np.isfinite(given["minor_faults"])
                                        & (given["minor_faults"] >= 0)).all():
        return None
    timed = [f"{p}_ms" for p in MARKED_PHASES if f"{p}_ms" in numbers]
    for key in ("step_ms", *timed):
        if not (np.isfinite(given[key]) & (given[key] >= 0) & (given[key] <= MAX_STEP_MS)).all():
            return None
    step_ms = numbers["step_ms"]
    phases = sum((np.nan_to_num(numbers[key]) for key in timed), np.zeros(count))
    if (step_ms == 0).any() or (phases > step_ms + PHASE_SLACK_MS).any():
        return None
    order = ["step", *(key for key in header if key != "step")]  # as _row builds a row
    if COMPILING not in parsed:  # no row is flagged yet: mark_compiling flags them once read
        numbers[COMPILING] = np.full(count, np.nan)
    return StepRows([dict(zip(order, row)) for row in zip(*(parsed[key] for key in order))],
                    columns=numbers, cells=parsed)


def _floats(values: list) -> np.ndarray:
    """A parsed column (numbers, None where a cell is empty) as floats, NaN for None."""
    return np.array(values if None not in values else [np.nan if v is None else v for v in values], float)


def _column(texts: tuple[str, ...], loss: bool) -> list:
    """A column's cells as _number reads them (None, int or float; a non-finite loss None),
    with the builtins' loops over the whole column where its cells are all alike."""
    joined = "\x00".join(texts)
    if max(map(len, texts)) > 40 or _SPACE.search(joined):
        raise ValueError("a cell that only the row-by-row path reads right")
    if "" not in texts and "." not in joined and not _OTHER_THAN_POINT.search(joined):
        return list(map(int, texts))        # all written whole: _number's ints
    if "" not in texts and joined.count(".") == len(texts) and not _OTHER_THAN_POINT.search(joined):
        values = list(map(float, texts))    # a point in every cell (float() refuses two in one)
    else:
        values = [_number(text) for text in texts]
    if loss:
        values = [v if v is None or math.isfinite(v) else None for v in values]
    return values


def row_problem(raw: dict) -> str | None:
    """Why a csv.DictReader row is no measurement, or None."""
    return _row(raw)[1]


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


# The row field mark_compiling sets: the step recompiled or retraced, an event, not steady time.
COMPILING = "compiling"


class StepRows(list):
    """steps.csv's rows, dicts as every figure reads them, whose cells a figure over all of them
    takes a column at a time (`column`): each column is made once and kept, since a breakdown
    of 100k rows passed over their dicts some thirty times. A subset (`where`) takes its
    columns from its parent's while both still hold the rows it was taken from."""

    def __init__(self, rows=(), parent: StepRows | None = None, kept: np.ndarray | None = None,
                 columns: dict[str, np.ndarray] | None = None, cells: dict[str, list] | None = None):
        super().__init__(rows)
        self._columns: dict[str, np.ndarray] = {}
        self._parent, self._kept = parent, kept
        # What the reader parsed, a column at a time: its arrays, and its lists of numbers.
        self._cells = cells or {}
        for key, made in (columns or {}).items():
            self._keep(key, made)

    def column(self, key: str) -> np.ndarray:
        """The cells of `key` as floats (a flag 1.0), NaN where a row has none."""
        made = self._columns.get(key)
        if made is None or len(made) != len(self):
            parent, kept, cells = self._parent, self._kept, self._cells.get(key)
            if parent is not None and len(parent) == len(kept) and np.count_nonzero(kept) == len(self):
                made = parent.column(key)[kept]
            elif cells is not None and len(cells) == len(self):
                made = _floats(cells)
            else:
                made = _column_of(self, key)
            self._keep(key, made)
        return made

    def _keep(self, key: str, made: np.ndarray) -> None:
        made.flags.writeable = False  # shared by every figure that asks
        self._columns[key] = made

    def flag(self, key: str, rows: np.ndarray) -> None:
        """Keeps `key`'s column as the flag just set on the dicts of `rows` (mark_compiling)."""
        made = self.column(key).copy()
        made[rows] = 1.0
        self._keep(key, made)


def column(rows: list[dict], key: str) -> np.ndarray:
    """The cells of `key` over `rows` as floats, NaN where a row has none (StepRows keep it)."""
    return rows.column(key) if isinstance(rows, StepRows) else _column_of(rows, key)


def _column_of(rows: list[dict], key: str) -> np.ndarray:
    return np.fromiter((np.nan if (v := r.get(key)) is None else v for r in rows), float, len(rows))


def flagged(rows: list[dict], key: str) -> np.ndarray:
    """Which rows have `key` set (a flag: traced, compiling), as `r.get(key)` is true."""
    cells = column(rows, key)
    return (cells != 0) & ~np.isnan(cells)


def where(rows: list[dict], keep: np.ndarray) -> StepRows:
    """The rows `keep` marks, in their order, their columns taken from `rows` where it keeps them."""
    return StepRows(compress(rows, keep), rows if isinstance(rows, StepRows) else None, keep)


def steady(rows: list[dict], warmup_steps: int) -> StepRows:
    """Rows of steps numbered from `warmup_steps` on: by step number, not position, so a row
    dropped before them does not move a warm-up step into the steady state. A step that
    compiled after the warm-up (mark_compiling) is left out too. (A new list each call.)"""
    return where(rows, (column(rows, "step") >= warmup_steps) & ~flagged(rows, COMPILING))


def mark_compiling(rows: list[dict], steps: list[int]) -> list[dict]:
    """Flags the rows of `steps` (a recompile or a retrace after the warm-up) as no steady steps."""
    if not steps:
        return rows
    hit = np.flatnonzero(np.isin(column(rows, "step"), sorted(set(steps))))
    for i in hit.tolist():
        rows[i][COMPILING] = True
    if isinstance(rows, StepRows):
        rows.flag(COMPILING, hit)
    return rows


def compiling(rows: list[dict]) -> StepRows:
    """The rows mark_compiling flagged."""
    return where(rows, flagged(rows, COMPILING))


def warm_up(rows: list[dict], warmup_steps: int) -> StepRows:
    return where(rows, column(rows, "step") < warmup_steps)


def warmup_from_rows(rows: list[dict]) -> int | None:
    """The warm-up steps.csv itself records (its `warmup` column): the step after the last one
    flagged. None when the file has no such column (a foreign or older file)."""
    if not rows or np.isnan(column(rows, "warmup")).any():
        return None
    flagged_steps = column(rows, "step")[flagged(rows, "warmup")]
    return int(flagged_steps.max()) + 1 if len(flagged_steps) else 0
