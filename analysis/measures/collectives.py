"""The collectives of one rank's trace and how much of their time the step waited on (exposed) or hid behind compute (overlapped)."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np

from gapscope.analysis.events import intervals
from gapscope.analysis.events.columns import NONE, code
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import HOST_OP, KERNEL, RUNTIME, Trace
from gapscope.profilers.phases import PHASES

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
         "all_to_all", "send", "recv", "barrier", "unnamed")
# A generic NCCL/RCCL kernel (ncclDevKernel_Generic) whose launch no host range names: it
# is communication all the same, of a kind the trace does not say.
UNNAMED = "unnamed"
GLOO, NCCL, TF = "gloo", "nccl", "tf"

# Bytes per element of the dtypes torch and NCCL name (record_param_comms writes "Float",
# a gloo range's input type "float", a kernel name "f32" or "float").
_DTYPE_BYTES = {
    **dict.fromkeys(("float", "float32", "f32", "int", "int32", "i32", "u32", "uint32"), 4),
    **dict.fromkeys(("double", "float64", "f64", "long", "int64", "i64", "u64", "uint64"), 8),
    **dict.fromkeys(("half", "float16", "f16", "bfloat16", "bf16", "b16", "short", "int16"), 2),
    **dict.fromkeys(("char", "int8", "i8", "u8", "uint8", "byte", "bool", "float8_e4m3fn",
                     "float8_e5m2", "f8e4m3", "f8e5m2"), 1),
}

# Words of a collective's name (gloo:all_reduce, c10d::allgather_, ncclDevKernel_AllGather_...,
# record_param_comms' "_allgather_base", TF's CollectiveReduceV2) -> the normalised kind.
_KIND_WORDS = (
    ("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"), ("allgather", "all_gather"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("bcast", "broadcast"),
    ("barrier", "barrier"), ("sendrecv", "send"), ("send", "send"), ("recv", "recv"),
    ("scatter", "scatter"), ("gather", "gather"), ("reduce", "reduce"),
)
# TF's collective ops (on the CPU they run the collective themselves; NcclAllReduce only
# queues NCCL's kernel, which the device plane shows).
_TF_OPS = {"CollectiveReduce": "all_reduce", "CollectiveReduceV2": "all_reduce",
           "CollectiveReduceV3": "all_reduce", "CollectiveGather": "all_gather",
           "CollectiveGatherV2": "all_gather", "CollectiveBcastSend": "broadcast",
           "CollectiveBcastRecv": "broadcast", "CollectiveBcastSendV2": "broadcast",
           "CollectiveBcastRecvV2": "broadcast", "CollectiveAllToAllV2": "all_to_all",
           "CollectiveAllToAllV3": "all_to_all", "NcclAllReduce": "all_reduce",
           "NcclReduce": "reduce", "NcclBroadcast": "broadcast"}
# Host ops that only hand a collective over or wait for one: on the rank's own threads they
# are not compute (the wait is the very time exposed communication costs).
# (DDP's reducer ops around them, copy_bucket_to_grad say, copy gradients: compute.)
# hccl: is Ascend's collective library, whose ranges torch_npu writes as NCCL's.
_DISPATCH = re.compile(r"^(c10d::|c10d_functional::|_c10d_functional::|record_param_comms|nccl:|hccl:|gloo:)")


def is_collective_range(name: str) -> bool:
    """A host event that issues, runs or waits for a collective (c10d::allreduce_, nccl:all_reduce,
    record_param_comms, gloo:all_reduce)."""
    return bool(_DISPATCH.match(name))


@dataclass(frozen=True)
class Collective:
    kind: str        # one of KINDS
    start_us: float
    end_us: float    # on the trace's own clock
    nbytes: int | None
    step: int | None   # index into timeline.steps, None outside every step
    phase: str | None  # phase of the host where it was issued
    source: str      # "gloo" | "nccl" | "tf"
    seq: int         # 0, 1, 2.. order among this rank's collectives


@dataclass
class Communication:
    """Means per traced step. comm_ms: the time with at least one collective in flight; of
    it, overlapped_ms ran while the rank computed and exposed_ms while it did not, the time
    the step waited on communication; exposed_by_phase: where the host was meanwhile (the
    timeline's phase at that instant; every phase of PHASES, adding up to exposed_ms).

    Computing means, on the GPU (NCCL), a kernel other than a collective running on the
    same device: that is what the collective hides behind. On the CPU (gloo, TF), a host op
    running on the rank's own threads: gloo's worker threads run the collective itself and
    are left out, as are the ops that only hand a collective over or wait for one
    (c10d::allreduce_ and the like, even nested in an autograd op); a stretch with none of
    these ops running is the thread blocked, mostly in DDP's wait for its buckets at the end
    of backward (short gaps between ops count too: the thread ran no op then either).

    A gloo range ends when its worker thread records the end, after it has woken the
    waiting thread; on a loaded machine that can be milliseconds after the collective
    completed (seen: 0.8 and 3.1 ms on 2 shared cores), and a range the profiler stopped
    first ends at the stop. comm_ms then runs long; the waiting thread is busy again by
    then, so the extra mostly reads as overlapped, and exposed_ms stays close."""

    steps: int
    per_kind: dict[str, dict]   # kind -> {"count", "bytes" (None unless every one says), "ms"}
    comm_ms: float
    overlapped_ms: float
    exposed_ms: float
    exposed_by_phase: dict[str, float]
    source: str

    def to_json_dict(self) -> dict:
        return {"steps": self.steps, "source": self.source,
                "per_kind": {k: dict(v) for k, v in self.per_kind.items()},
                "comm_ms": self.comm_ms, "overlapped_ms": self.overlapped_ms,
                "exposed_ms": self.exposed_ms, "exposed_by_phase": dict(self.exposed_by_phase)}


@dataclass
class _Found:
    """One collective as read from the trace, before it is placed in a step."""
    kind: str
    start_us: float
    end_us: float
    nbytes: int | None
    issued_us: float  # when the host issued it: the step and phase it belongs to
    track: str
    source: str


def find_collectives(trace: Trace, timeline: PhaseTimeline) -> list[Collective]:
    found, _ = _find(trace)
    return _placed(found, timeline)


def communication(trace: Trace, timeline: PhaseTimeline) -> Communication | None:
    """None where the trace's steps hold no collective (a one-process run, or no steps)."""
    found, compute = _find(trace)
    collectives = _placed(found, timeline)
    if not timeline.steps or not any(c.step is not None for c in collectives):
        return None
    n = len(timeline.steps)
    in_flight = intervals.merge([(f.start_us, f.end_us) for f in found])
    of_kind = {kind: intervals.merge([(f.start_us, f.end_us) for f in found if f.kind == kind])
               for kind in {f.kind for f in found}}
    comm_total = 0.0
    exposed_by_phase = dict.fromkeys(PHASES, 0.0)
    kind_ms = dict.fromkeys(of_kind, 0.0)
    for step, window in enumerate(timeline.steps):
        # Each step's window on its own: a collective still in flight when the next step
        # begins counts in both, for the part that lies in each.
        lo, hi = window.start_us, window.end_us
        comm = intervals.clip_merged(in_flight, lo, hi)
        exposed = intervals.subtract(comm, intervals.clip_merged(compute, lo, hi))
        comm_total += intervals.total(comm)
        for start, end, phase in timeline.covering(step):
            exposed_by_phase[phase] += intervals.total(intervals.clip_merged(exposed, start, end))
        for kind, own in of_kind.items():
            kind_ms[kind] += intervals.total(intervals.clip_merged(own, lo, hi))
    per_kind = {}
    for kind in sorted({c.kind for c in collectives if c.step is not None}, key=KINDS.index):
        mine = [c for c in collectives if c.kind == kind and c.step is not None]
        moved = None if any(c.nbytes is None for c in mine) else sum(c.nbytes for c in mine) / n
        per_kind[kind] = {"count": len(mine) / n, "bytes": moved, "ms": kind_ms.get(kind, 0.0) / 1000 / n}
    exposed_by_phase = {phase: us / 1000 / n for phase, us in exposed_by_phase.items()}
    exposed_ms = sum(exposed_by_phase.values())  # so the phases add up to it exactly
    comm_ms = comm_total / 1000 / n
    return Communication(steps=n, per_kind=per_kind, comm_ms=comm_ms,
                         overlapped_ms=comm_ms - exposed_ms, exposed_ms=exposed_ms,
                         exposed_by_phase=exposed_by_phase, source=collectives[0].source)


def _placed(found: list[_Found], timeline: PhaseTimeline) -> list[Collective]:
    placed = []
    for seq, f in enumerate(sorted(found, key=lambda f: (f.start_us, f.end_us))):
        step, phase = timeline.locate(f.issued_us)
        placed.append(Collective(f.kind, f.start_us, f.end_us, f.nbytes, step, phase, f.source, seq))
    return placed


def _find(trace: Trace) -> tuple[list[_Found], list[intervals.Interval]]:
    """The collectives of one source (NCCL kernels before gloo ranges before TF ops: the
    first the trace has does the communicating) and the rank's compute while they ran."""
    columns = trace.columns
    kinds = columns.kind_codes()
    name_kind = {}  # name id -> (source, kind) for the names that are collectives
    for name_id, name in enumerate(columns.names):
        which = _classify(name)
        if which is not None:
            name_kind[name_id] = which
    if not name_kind:
        return [], []
    ids = np.fromiter(name_kind, np.int64)
    rows = np.flatnonzero(np.isin(columns.name, ids))
    by_source: dict[str, list[int]] = {}
    for row in rows.tolist():
        source, _ = name_kind[int(columns.name[row])]
        track_kind, _ = columns.wheres[columns.where[row]]
        if source == NCCL and track_kind != KERNEL:
            continue  # NCCL's host ranges: the kernel is the collective
        by_source.setdefault(source, []).append(row)
    for source in (NCCL, GLOO, TF):
        if source in by_source:
            chosen = by_source[source]
            break
    else:
        return [], []
    if source == NCCL:
        return _nccl(trace, chosen, name_kind, kinds)
    return _host_collectives(trace, chosen, name_kind, kinds, source)


def _classify(name: str) -> tuple[str, str] | None:
    """(source, kind) of an event name that is a collective itself, else None. Newer NCCL and
    RCCL builds name every kernel ncclDevKernel_Generic(…): its kind is None here, and the
    host range that launched it names it (_nccl)."""
    if name.startswith("gloo:"):
        kind = _kind_of(name[5:])
        return (GLOO, kind) if kind else None
    # NCCL's kernels (lower case: TF's NcclAllReduce op only queues one).
    if name.startswith(("nccl", "void nccl")) and not name.startswith("nccl:"):
        kernel = name.partition("(")[0]  # the kernel's arguments name no collective
        kind = _kind_of(kernel)
        if kind is None and "generic" not in kernel.lower():
            return None
        return NCCL, kind
    op_type = name.rpartition(":")[2] if ":" in name else name
    if op_type in _TF_OPS and op_type != name or name in _TF_OPS:
        return TF, _TF_OPS[op_type]
    return None


def _kind_of(text: str) -> str | None:
    words = text.lower().replace("_", "").replace("-", "")
    for word, kind in _KIND_WORDS:
        if word in words:
            return kind
    return None


def _host_collectives(trace: Trace, rows: list[int], name_kind: dict, kinds, source: str):
    """gloo ranges (each on a gloo worker thread: those threads are not the rank's compute)
    or TF collective ops (on TF's own executor threads, among the compute)."""
    columns = trace.columns
    comm_tracks = {columns.wheres[columns.where[row]][1] for row in rows} if source == GLOO else set()
    found = []
    for row in rows:
        e = columns.event(row)
        found.append(_Found(name_kind[int(columns.name[row])][1], e.start_us, e.end_us,
                            _bytes_of(e.stats), e.start_us, e.track, source))
    if source == GLOO:
        found = _issued_by_dispatch(trace, found)
    # Compute: the host ops on the rank's own threads, less the ops that only hand over or
    # wait for a collective (c10d::allreduce_ sits inside an autograd op: its time is taken
    # out of that op's, as is the wait DDP's reducer does at the end of backward).
    host_ops = kinds == code(HOST_OP)
    tracks = [track for _, track in columns.wheres]
    own_track = np.array([track.startswith("host") and track not in comm_tracks for track in tracks],
                         bool)[columns.where]
    dispatch_name = np.array([bool(_DISPATCH.match(name)) or _classify(name) is not None
                              for name in columns.names], bool)[columns.name]
    ends = columns.start_us + columns.dur_us
    work = host_ops & own_track & ~dispatch_name
    waits = host_ops & own_track & dispatch_name
    compute = intervals.subtract(intervals.merge_arrays(columns.start_us[work], ends[work]),
                                 intervals.merge_arrays(columns.start_us[waits], ends[waits]))
    return found, compute


def _issued_by_dispatch(trace: Trace, found: list[_Found]) -> list[_Found]:
    """A gloo range starts when a worker thread takes the collective from gloo's queue; it
    was issued earlier, by the c10d dispatcher op on the training thread. The queue is
    first-in first-out, so the n-th range of a kind goes with the n-th dispatch of it."""
    columns = trace.columns
    dispatches: dict[str, list] = {}
    for name_id, name in enumerate(columns.names):
        if name.startswith("c10d::"):
            kind = _kind_of(name[6:])
            if kind:
                dispatches.setdefault(kind, []).append(name_id)
    issued: dict[str, list] = {}
    for kind, ids in dispatches.items():
        rows = np.flatnonzero(np.isin(columns.name, ids))
        issued[kind] = sorted((float(columns.start_us[r]), columns.event(int(r)).stats) for r in rows)
    out = []
    by_kind: dict[str, list[_Found]] = {}
    for f in sorted(found, key=lambda f: f.start_us):
        by_kind.setdefault(f.kind, []).append(f)
    for kind, ranges in by_kind.items():
        calls = issued.get(kind, [])
        if len(calls) != len(ranges):
            out += ranges  # a window that cut a pair apart: each range keeps its own start
            continue
        for f, (start, stats) in zip(ranges, calls):
            nbytes = f.nbytes
            if nbytes is None:
                nbytes = _bytes_of(stats)
            out.append(_Found(f.kind, f.start_us, f.end_us, nbytes, min(start, f.start_us), f.track,
                              f.source))
    return out


def _nccl(trace: Trace, rows: list[int], name_kind: dict, kinds):
    """NCCL kernels, each named and sized by what launched it: the kernel's own args, else the
    CPU-side collective around its launch (record_param_comms, nccl:*, c10d::*), else the
    kernel's name; compute is every other kernel on the same device."""
    columns = trace.columns
    launches = _launches(trace, kinds, rows)
    ranges = _host_comm_ranges(trace)
    found = []
    for row in rows:
        e = columns.event(row)
        stats = e.stats or {}
        issued, launch_track = launches.get(e.correlation, (e.start_us, None))
        around = _enclosing(ranges.get(launch_track), issued) if launch_track is not None else []
        # A SendRecv kernel serves all_to_all, all_gather and send/recv alike: the host says which.
        named = [stats.get("collective")] + [_range_kind(name, st) for name, st in around]
        kind = next((k for k in map(_kind_of_or_none, named) if k),
                    name_kind[int(columns.name[row])][1] or UNNAMED)
        nbytes = _bytes_of(stats) if stats else None
        if nbytes is None:
            nbytes = next((b for b in (_bytes_of(st) for name, st in around
                                       if name == "record_param_comms") if b is not None), None)
        found.append(_Found(kind, e.start_us, e.end_us, nbytes, issued, e.track, NCCL))
    devices = {_device(f.track) for f in found}
    kernel_rows = kinds == code(KERNEL)
    comm_name = np.zeros(len(columns.names), bool)
    comm_name[list(name_kind)] = True
    tracks = [track for _, track in columns.wheres]
    on_device = np.array([track.startswith("device") and _device(track) in devices for track in tracks],
                         bool)[columns.where]
    work = kernel_rows & on_device & ~comm_name[columns.name]
    ends = columns.start_us + columns.dur_us
    return found, intervals.merge_arrays(columns.start_us[work], ends[work])


def _kind_of_or_none(text) -> str | None:
    return _kind_of(text) if isinstance(text, str) and text else None


def _range_kind(name: str, stats: dict | None) -> str | None:
    """The collective a host range names: record_param_comms in its args, the others in their
    names (nccl:all_to_all, c10d::allgather_)."""
    if name == "record_param_comms":
        return (stats or {}).get("collective")
    return name.partition(":")[2].lstrip(":")


def _device(track: str) -> str:
    return track.split("/")[1]


def _launches(trace: Trace, kinds, rows: list[int]) -> dict[int, tuple[float, str]]:
    """correlation id -> (start, track) of the runtime call that launched each of these
    kernels (looked up for them alone: a GPU trace holds a launch per kernel, millions)."""
    columns = trace.columns
    wanted = columns.correlation[rows]
    wanted = wanted[wanted != NONE]
    launch_rows = np.flatnonzero((kinds == code(RUNTIME)) & np.isin(columns.correlation, wanted))
    found = {}
    for row in launch_rows.tolist():
        found[int(columns.correlation[row])] = (float(columns.start_us[row]),
                                                columns.wheres[columns.where[row]][1])
    return found


# Host ranges around an NCCL kernel's launch, naming its collective: the c10d op, torch's
# record_param_comms (its args: the collective's name and size), and the nccl:* range.
_HOST_COMM = re.compile(r"^(record_param_comms$|nccl:|hccl:|c10d::|c10d_functional::|_c10d_functional::)")
# Ranges nest (c10d::alltoall_ > record_param_comms > nccl:all_to_all > the launch): how many
# earlier-starting ranges to look through for the ones around an instant.
_NESTING = 8


def _host_comm_ranges(trace: Trace) -> dict[str, list]:
    """Per host track, its collective ranges as (start, end, name, stats), sorted by start."""
    columns = trace.columns
    ids = [i for i, name in enumerate(columns.names) if _HOST_COMM.match(name)]
    per_track: dict[str, list] = {}
    for row in np.flatnonzero(np.isin(columns.name, ids)).tolist():
        e = columns.event(row)
        per_track.setdefault(e.track, []).append((e.start_us, e.end_us, e.name, e.stats))
    return {track: sorted(ops, key=lambda op: op[0]) for track, ops in per_track.items()}


def _enclosing(ranges: list | None, t: float) -> list[tuple[str, dict | None]]:
    """(name, stats) of the ranges whose span holds instant t, innermost first."""
    if not ranges:
        return []
    i = bisect.bisect_right(ranges, t, key=lambda op: op[0])
    return [(op[2], op[3]) for op in reversed(ranges[max(0, i - _NESTING):i]) if op[1] >= t]


def _bytes_of(stats: dict | None) -> int | None:
    """Bytes a collective moved, from what its event says: element counts and a dtype
    (record_param_comms, NCCL kernels: the larger of in and out, as an all-gather's output
    is the whole), or a gloo range's input types and dims (recorded with shapes)."""
    if not stats:
        return None
    size = _DTYPE_BYTES.get(str(stats.get("dtype", "")).lower().removeprefix("c10::"))
    counts = [stats[k] for k in ("in_nelems", "out_nelems") if k in stats]
    if size and counts:
        return max(counts) * size
    types, dims = stats.get("input_type"), stats.get("input_dims")
    if not isinstance(types, list) or not isinstance(dims, list):
        return None
    total = 0
    for dtype, shape in zip(types, dims):
        size = _DTYPE_BYTES.get(str(dtype).lower())
        if size is None or not isinstance(shape, list):
            continue
        if not all(isinstance(d, int) for d in shape):
            return None  # a tensor list: its element type is not written
        total += size * int(np.prod(shape, dtype=np.int64))
    return total or None
