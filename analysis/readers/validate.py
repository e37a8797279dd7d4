"""Checks every reader applies to the events it reads, so that garbage is counted or refused, never summed."""
from __future__ import annotations

import math
from collections import Counter, defaultdict

from gapscope.profilers.errors import TraceFormatError
from gapscope.analysis.events.trace import STEP, Event

# A duration over a day or a time stamp past the year 2286 (in µs since the epoch) is no
# measurement: a corrupt or hand-edited file. Below those, float µs keep sub-µs precision.
MAX_DUR_US = 86_400e6
MAX_TS_US = 1e16
# Where more than this share of the complete events is invalid, the rest cannot be trusted.
MAX_DROPPED_SHARE = 0.5

MISSING = "missing ts or dur"
NOT_FINITE = "non-finite ts or dur"
NEGATIVE = "negative ts or dur"
ABSURD = "dur over a day or ts implausible"
DUPLICATE_STEP = "duplicate step event"
ZERO_STEP = "zero-length step"
OVERLAPPING_STEPS = "overlapping steps"
UNREADABLE_STEP_NUMBER = "unreadable step number"
REPEATED_STEP_NUMBER = "step number repeated"


def time_problem(ts, dur) -> str | None:
    """Why (ts, dur) in µs is no valid complete event, or None when it is."""
    if ts is None or dur is None:
        return MISSING
    if not (math.isfinite(ts) and math.isfinite(dur)):
        return NOT_FINITE
    if ts < 0 or dur < 0:
        return NEGATIVE
    if ts > MAX_TS_US or dur > MAX_DUR_US:
        return ABSURD
    return None


def step_number(tail: str) -> int | None:
    """The N of a step name's "#N": plain ASCII digits that fit a step count, else None
    (int() of 5,000 digits raises, and "²".isdigit() is True)."""
    if tail.isascii() and tail.isdigit() and len(tail) <= 18:
        return int(tail)
    return None


def refuse_mostly_garbage(path, kept: int, dropped: Counter) -> None:
    bad = sum(dropped.values())
    if bad and bad > MAX_DROPPED_SHARE * (kept + bad):
        raise TraceFormatError(f"{path}: {bad:,} of {kept + bad:,} complete events are invalid "
                               f"({_describe(dropped)}): refusing the trace")


def check_steps(path, events: list[Event], dropped: Counter) -> tuple[list[Event], dict]:
    """Drops duplicate (same name, start and duration), zero-length and unnumbered step events
    ("ProfilerStep#" + 5,000 digits), counting them in `dropped`; returns the events and the
    problems of the steps that remain (overlaps), by kind. Refuses a trace whose steps were
    all invalid: what is left would be numbers about something else."""
    steps = [e for e in events if e.kind == STEP]
    if not steps:
        return events, {}
    seen, numbered, bad_ids, repeated = set(), set(), set(), 0
    # In start order, so that of two events with one step number the first is kept.
    for e in sorted(steps, key=lambda e: e.start_us):
        key = (e.name, e.start_us, e.dur_us)
        # One step number once per kind of step and track (a host's and a device's Steps
        # lines may both number step N): a second one is a copy, shifted or not.
        number = (e.name.rpartition("#")[0], e.track, e.step_num)
        if e.dur_us <= 0:
            dropped[ZERO_STEP] += 1
            bad_ids.add(id(e))
        elif e.step_num is None:
            dropped[UNREADABLE_STEP_NUMBER] += 1
            bad_ids.add(id(e))
        elif key in seen:
            dropped[DUPLICATE_STEP] += 1
            bad_ids.add(id(e))
        elif number in numbered:
            dropped[REPEATED_STEP_NUMBER] += 1
            bad_ids.add(id(e))
            repeated += 1
        else:
            seen.add(key)
            numbered.add(number)
    if repeated and repeated > MAX_DROPPED_SHARE * len(steps):
        raise TraceFormatError(f"{path}: {repeated:,} of {len(steps):,} step events repeat a step "
                               "number (every step numbered alike?): refusing the trace")
    if bad_ids:
        events = [e for e in events if id(e) not in bad_ids]
        steps = [e for e in steps if id(e) not in bad_ids]
        if not steps:
            raise TraceFormatError(f"{path}: every step event is invalid ({_describe(dropped)})")
    problems: Counter = Counter()
    # Steps of one kind (ProfilerStep#, gapscope/step#) follow each other; different kinds
    # nest by design. Only same-kind overlaps are a problem.
    by_kind: dict[str, list[Event]] = defaultdict(list)
    for e in steps:
        by_kind[e.name.rpartition("#")[0]].append(e)
    for same in by_kind.values():
        same.sort(key=lambda e: e.start_us)
        end = -math.inf
        for e in same:
            if e.start_us < end:
                problems[OVERLAPPING_STEPS] += 1
            end = max(end, e.end_us)
    return events, dict(problems)


def _describe(counts: Counter) -> str:
    return ", ".join(f"{n:,} {why}" for why, n in counts.most_common())


# Other profilers' files users bring for a trace, known by their first bytes: a refusal names
# the format, and what gapscope reads instead. rocprofv3 (rocprofiler-sdk) writes its JSON
# under one "rocprofiler-sdk-tool" key, and its rocpd output (ROCm 7's default) is SQLite.
_OTHER_FORMATS = ((b'"rocprofiler-sdk-tool"', "a rocprofiler-sdk (rocprofv3) JSON file"),
                  (b"SQLite format 3\x00", "an SQLite database (rocprofv3's rocpd output, or an "
                                            "Nsight Systems export)"))
OTHER_FORMAT_HINT = ("gapscope reads torch.profiler traces (ROCm builds write them too) and "
                     "TensorFlow/JAX XSpaces")


def other_format(head: bytes) -> str | None:
    """The name of another profiler's format the file's first bytes show, else None."""
    for mark, name in _OTHER_FORMATS:
        if head.startswith(mark) or (mark.startswith(b'"') and mark in head[:4096]):
            return name
    return None
