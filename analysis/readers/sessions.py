"""Several profiler sessions in one folder: each named (file, start, steps, rank), one chosen by the
user, or one process's successive profiler windows read as one trace."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import numpy as np

from gapscope.analysis.events.trace import STEP, Trace
from gapscope.analysis.readers import safe_files
from gapscope.analysis.readers.torch_records import FLOPS_KEY
from gapscope.profilers.errors import GapscopeInputError

# What `--session` takes besides a number or a file: every session, as one trace.
ALL = "all"
# The head read to name a session: Kineto writes the host ops (ProfilerStep#N among them) before
# the device events, so the step numbers are near the front.
_HEAD = 4 << 20
_STEP = re.compile(rb'"ProfilerStep#(\d+)"')
_BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
# torch's tensorboard_trace_handler: <worker>.<epoch ms>.pt.trace.json; TF's profile plugin:
# plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb.
_EPOCH_MS = re.compile(r"\.(1\d{12})\.")
_TF_SESSION = re.compile(r"^(\d{4})_(\d\d)_(\d\d)_(\d\d)_(\d\d)_(\d\d)$")


@dataclass(frozen=True)
class Session:
    path: Path
    started: datetime
    steps: tuple[int, ...] = ()  # step numbers its head names
    rank: int | None = None

    def describe(self, folder: Path) -> str:
        facts = [f"started {self.started:%Y-%m-%d %H:%M:%S} UTC"]
        if self.steps:
            first, last = self.steps[0], self.steps[-1]
            facts.append(f"step {first}" if first == last else f"steps {first}-{last}")
        if self.rank is not None:
            facts.append(f"rank {self.rank}")
        return f"{self.path.relative_to(folder)} ({', '.join(facts)})"


def sessions(paths: list[Path]) -> list[Session]:
    """The sessions of these trace files, oldest first (the order --session numbers them in)."""
    found = [_xplane_session(p) if p.name.endswith(".xplane.pb") else _torch_session(p) for p in paths]
    return sorted(found, key=lambda s: (s.started, str(s.path)))


def ordered(paths: list[Path]) -> list[Path]:
    return [s.path for s in sessions(paths)]


def refusal(folder: Path, paths: list[Path]) -> str:
    """One line naming every session and how to choose or combine them."""
    listed = sessions(paths)
    kind = "XSpace (.xplane.pb)" if all(p.name.endswith(".xplane.pb") for p in paths) else "torch trace"
    named = "; ".join(f"[{i}] {s.describe(folder)}" for i, s in enumerate(listed, start=1))
    combine = "" if kind != "torch trace" else \
        f", or --session {ALL} to read one process's successive windows as one run"
    return (f"{folder}: {len(listed)} {kind} sessions: {named}: choose one with --session N "
            f"(breakdown, trace) or by giving its file path{combine}")


def choose(folder: Path, paths: list[Path], choice: str) -> list[Path]:
    """The sessions `choice` names: its number as listed, its file (name or path), or ALL."""
    if not paths:
        raise GapscopeInputError(f"--session {choice}: {folder} holds no trace sessions")
    listed = ordered(paths)
    if choice == ALL:
        if any(p.name.endswith(".xplane.pb") for p in listed):
            raise GapscopeInputError(f"--session {ALL}: only torch traces are combined; "
                                     f"choose one session of {folder}")
        return listed
    if choice.isdigit() and 1 <= int(choice) <= len(listed):
        return [listed[int(choice) - 1]]
    named = [p for p in listed if choice in (p.name, str(p.relative_to(folder)), str(p))]
    if len(named) == 1:
        return named
    raise GapscopeInputError(f"--session {choice}: no such session; " + refusal(folder, paths))


def read_combined(paths: list[Path], read) -> tuple[Trace, str]:
    """Successive profiler windows of one process as one trace (`read` reads one file): times
    put on one clock, correlation ids kept apart; and the note that says so. Windows that
    overlap in steps or come from different ranks are no one run's, and are refused."""
    traces = [read(p) for p in paths]
    ranks = {(t.metadata.get("distributed_info") or {}).get("rank") for t in traces}
    if len(ranks) > 1:
        raise GapscopeInputError(f"--session {ALL}: the sessions are of ranks {sorted(map(str, ranks))}: "
                                 "a job's ranks are no successive windows; give the folder of ranks")
    bases = [t.metadata.get("base_time_ns") for t in traces]
    origin = min(bases) if all(isinstance(b, int) for b in bases) else None
    events, seen_steps, correlation_offset, products = [], set(), 0, []
    for trace, base in zip(traces, bases):
        shift = (base - origin) / 1000.0 if origin is not None else 0.0
        if FLOPS_KEY in trace.metadata:
            starts, flops = trace.metadata[FLOPS_KEY]
            products.append((starts + shift, flops))
        steps = {e.step_num for e in trace.events if e.step_num is not None and e.kind == STEP}
        if steps & seen_steps:
            raise GapscopeInputError(
                f"--session {ALL}: {Path(trace.path).name} repeats steps {sorted(steps & seen_steps)[:3]}: "
                "these sessions are not successive windows of one run; choose one with --session N")
        seen_steps |= steps
        events += [msgspec.structs.replace(
            e, start_us=e.start_us + shift,
            correlation=None if e.correlation is None else e.correlation + correlation_offset)
            for e in trace.events]
        correlation_offset += 1 + max((e.correlation or 0 for e in trace.events), default=0)
    metadata = dict(traces[0].metadata, base_time_ns=origin, sessions=[str(p) for p in paths])
    metadata.pop(FLOPS_KEY, None)
    if products:
        metadata[FLOPS_KEY] = tuple(np.concatenate(column) for column in zip(*products))
    note = (f"{len(paths)} profiler sessions read as one run ({', '.join(p.name for p in paths)}): "
            "their steps are put together; the time between the windows is in no step")
    return Trace(traces[0].source_format, str(paths[0].parent), events, metadata), note


def _torch_session(path: Path) -> Session:
    try:
        head = safe_files.read_head(path, _HEAD)
    except GapscopeInputError:
        head = b""
    base = _BASE.search(head)
    named = _EPOCH_MS.search(path.name)
    if base:
        started = datetime.fromtimestamp(int(base.group(1)) / 1e9, timezone.utc)
    elif named:
        started = datetime.fromtimestamp(int(named.group(1)) / 1e3, timezone.utc)
    else:
        started = _modified(path)
    rank = _RANK.search(head)
    steps = tuple(sorted({int(m) for m in _STEP.findall(head)}))
    return Session(path, started, steps, int(rank.group(1)) if rank else None)


def _xplane_session(path: Path) -> Session:
    stamp = _TF_SESSION.match(path.parent.name)
    if stamp:  # the profiling host's local time
        started = datetime(*map(int, stamp.groups())).astimezone(timezone.utc)
    else:
        started = _modified(path)
    return Session(path, started)


def _modified(path: Path) -> datetime:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return datetime.fromtimestamp(0, timezone.utc)
