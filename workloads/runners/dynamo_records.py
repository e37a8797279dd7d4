"""Records what torch.compile did during a run, from Dynamo's own records: every compile (graph,
op count, recompile reason, time by stage) and every graph break (reason, user file:line), into
the run directory's compile.json."""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path

from gapscope.profilers import strict_json
from gapscope.profilers.run_dir import COMPILE_JSON, write_atomic

FORMAT_VERSION = 1
# Dynamo's per-compile timers (CompilationMetrics, torch 2.6+), each nested in the one before:
# the whole frame, AOT autograd with the backend under it, Inductor, its code generation, and
# the C++/Triton kernel compile torch counts inside code generation.
TIMER_FIELDS = ("dynamo_cumulative_compile_time_us", "aot_autograd_cumulative_compile_time_us",
                "inductor_cumulative_compile_time_us", "inductor_code_gen_cumulative_compile_time_us",
                "triton_compile_time_us", "backward_cumulative_compile_time_us", "duration_us")
_KEPT = ("compile_id", "co_name", "co_filename", "co_firstlineno", "is_forward", "graph_op_count",
         "graph_node_count", "guard_count", "recompile_reason", "fail_type", "fail_reason",
         "fail_user_frame_filename", "fail_user_frame_lineno", "inductor_fx_local_cache_hit_count",
         "inductor_fx_local_cache_miss_count", "aotautograd_local_cache_hit_count") + TIMER_FIELDS
# "Graph break in user code at FILE:LINE" (torch 2.4+), "Graph break (user stack suppressed due to
# duplicate graph break) in user code at FILE:LINE", then "Graph Break Reason: ..." lines.
_BREAK_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.M)
_BREAK_REASON = re.compile(r"^Graph Break Reason: (?P<reason>.*)$", re.M)
_EXPLANATION = re.compile(r"^\s*Explanation: (?P<text>.*)$", re.M)
_SEEN_LOGGER = "torch._dynamo"  # the artifact loggers (…symbolic_convert.__graph_breaks) feed it
_ARTIFACTS = ("__graph_breaks", "__recompiles")


class _Unprinted(logging.Filter):
    """Keeps the artifacts gapscope turned on off a user's stderr (their own TORCH_LOGS aside):
    a capture records them, it does not print pages of them into the user's console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.endswith(_ARTIFACTS)


_UNPRINTED = _Unprinted()


class _BreakHandler(logging.Handler):
    def __init__(self, recorder: DynamoRecorder):
        super().__init__(logging.DEBUG)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.endswith("__graph_breaks"):
            return
        try:
            self.recorder.graph_breaks.append(graph_break_of(record.getMessage(), self.recorder.step))
        except Exception:  # noqa: BLE001 - a record lost, never the run
            pass


def graph_break_of(message: str, step: int) -> dict:
    """One graph break from Dynamo's graph_breaks log message."""
    at = _BREAK_AT.search(message)
    reason = _BREAK_REASON.search(message)
    explanation = _EXPLANATION.search(message)
    return {"step": step,
            "file": at.group("file") if at else None,
            "line": int(at.group("line")) if at else None,
            "reason": (reason.group("reason").strip() if reason
                       else message.strip().splitlines()[0] if message.strip() else None),
            "explanation": explanation.group("text").strip() if explanation else None}


def _plain(value):
    """JSON-safe: CompileId and other objects as their text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


class DynamoRecorder:
    """Around a run's steps: `end_step(i)` after step i tags what compiled during it; on exit the
    records go to compile.json. Private torch APIs: what a torch lacks is said, never faked.

    `quiet`: the user's own process (gapscope.capture, the trainer callbacks): the logs turned on
    to record graph breaks are not printed. `keep_empty`: False writes no compile.json where
    nothing compiled (a capture cannot know beforehand whether the loop calls torch.compile)."""

    def __init__(self, run_dir: Path, *, quiet: bool = False, keep_empty: bool = True):
        self.run_dir = Path(run_dir)
        self.quiet, self.keep_empty = quiet, keep_empty
        self._quieted: list[logging.Handler] = []
        self.step = 0
        self.graph_breaks: list[dict] = []
        self.compiles: list[dict] = []
        self.unavailable: list[str] = []
        self._handler = _BreakHandler(self)

    def __enter__(self) -> DynamoRecorder:
        import torch
        try:
            from torch._dynamo.utils import clear_compilation_metrics
            clear_compilation_metrics()
        except ImportError:
            self.unavailable.append(f"torch {torch.__version__} keeps no Dynamo compilation metrics")
        try:
            torch._logging.set_logs(graph_breaks=True, recompiles=True)
            if self.quiet and "TORCH_LOGS" not in os.environ:
                self._quieted = list(logging.getLogger(_SEEN_LOGGER).handlers)
                for handler in self._quieted:
                    handler.addFilter(_UNPRINTED)
            logging.getLogger(_SEEN_LOGGER).addHandler(self._handler)
        except Exception as exc:  # noqa: BLE001 - graph breaks unseen, the rest still recorded
            self.unavailable.append(f"graph breaks not logged: torch._logging.set_logs failed ({exc})")
        return self

    def end_step(self, step: int) -> None:
        """Compiles that finished during `step`; graph breaks logged after it belong to the next."""
        for metrics in self._new_metrics():
            self.compiles.append({**metrics, "step": step})
        self.step = step + 1

    def _new_metrics(self) -> list[dict]:
        """The records since the last call, taken out of torch's list: it keeps the last 64 only
        (a deque), so a long run's later compiles would be lost behind a count of the seen."""
        try:
            from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics
        except ImportError:
            return []
        new = list(get_compilation_metrics())
        if new:
            clear_compilation_metrics()
        return [{k: _plain(getattr(m, k, None)) for k in _KEPT} for m in new
                if dataclasses.is_dataclass(m)]

    @property
    def recorded(self) -> bool:
        """Whether anything compiled or broke a graph so far."""
        return bool(self.compiles or self.graph_breaks)

    def __exit__(self, *exc) -> None:
        logging.getLogger(_SEEN_LOGGER).removeHandler(self._handler)
        for handler in self._quieted:
            handler.removeFilter(_UNPRINTED)
        if "TORCH_LOGS" not in os.environ:  # back to torch's default logging (tests run on)
            import torch
            torch._logging.set_logs()
        self.end_step(self.step)  # a compile in a step that raised
        if not self.keep_empty and not self.recorded:
            return
        import torch
        write_atomic(self.run_dir / COMPILE_JSON, strict_json.dumps({
            "format": FORMAT_VERSION, "torch": torch.__version__, "compiles": self.compiles,
            "graph_breaks": self.graph_breaks, "unavailable": self.unavailable}, indent=1))
