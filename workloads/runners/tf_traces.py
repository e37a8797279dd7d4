"""Records each trace of a tf.function: the step it happened in, the input signature it was
traced for (tensor shapes and dtypes, Python values) and how long the Python trace took, for
compile.json; the retrace reasons are analysis.results.tf_retraces' to derive."""
from __future__ import annotations

import functools
import time
from pathlib import Path

from gapscope.profilers import strict_json
from gapscope.profilers.run_dir import COMPILE_JSON, write_atomic

FORMAT_VERSION = 1
_VALUE_CHARS = 80


def signature_of(args: tuple, kwargs: dict) -> list[dict]:
    """One entry per argument: a tensor's shape and dtype (what a new trace is keyed on), or a
    Python value's text (tf.function traces again for each new one)."""
    named = [(str(i), a) for i, a in enumerate(args)] + sorted(kwargs.items())
    return [entry for name, value in named for entry in _flat(name, value)]


def _flat(name: str, value) -> list[dict]:
    """Tuples, lists and dicts (Keras passes `(x, y)` as one argument) by their parts: arg 0.1."""
    if isinstance(value, (tuple, list)):
        return [e for i, v in enumerate(value) for e in _flat(f"{name}.{i}", v)]
    if isinstance(value, dict):
        return [e for k, v in sorted(value.items(), key=lambda kv: str(kv[0])) for e in _flat(f"{name}.{k}", v)]
    return [_arg(name, value)]


def _arg(name: str, value) -> dict:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        dims = shape.as_list() if hasattr(shape, "as_list") and shape.rank is not None else list(shape)
        return {"arg": name, "kind": "tensor", "shape": dims,
                "dtype": getattr(dtype, "name", str(dtype))}
    return {"arg": name, "kind": "python", "value": repr(value)[:_VALUE_CHARS]}


class TraceLog:
    """`wrap(fn)` before tf.function: fn's Python body runs only when TensorFlow traces it, so
    each call of the wrapper is one trace. `step` is set by the loop before each call."""

    def __init__(self, step_of=None):
        self.step = 0
        self._step_of = step_of  # Keras: the updates its callback counted, read at trace time
        self.traces: list[dict] = []
        self.functions: list = []   # the tf.functions, for their own tracing count

    def wrap(self, fn, name: str | None = None):
        @functools.wraps(fn)
        def traced(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                step = self._step_of() if self._step_of is not None else self.step
                self.traces.append({"function": name or fn.__name__, "step": step,
                                    "signature": signature_of(args, kwargs),
                                    "trace_ms": round((time.perf_counter() - started) * 1000.0, 3)})
        return traced

    def watch(self, function):
        """The tf.function made from a wrapped body: its tracing count goes beside the traces."""
        self.functions.append(function)
        return function

    def tracing_counts(self) -> dict[str, int | None]:
        counts = {}
        for f in self.functions:
            get = getattr(f, "experimental_get_tracing_count", None)
            counts[getattr(f, "__name__", "?")] = get() if callable(get) else None
        return counts

    def write(self, run_dir: Path, jit_compile: bool) -> None:
        write_atomic(Path(run_dir) / COMPILE_JSON, strict_json.dumps({
            "format": FORMAT_VERSION, "framework": "tf", "compiles": [], "graph_breaks": [],
            "tf_traces": self.traces, "tf_tracing_counts": self.tracing_counts(),
            "unavailable": ["XLA cluster compile time is not recorded: TensorFlow reports no per-cluster "
                            "compile time to the process" if jit_compile else
                            "graph optimisation after each trace is not timed apart: it is in the unattributed rest"]},
            indent=1))


class PhaseTraces(TraceLog):
    """The traces of a user's own tf.functions, seen from inside them: `cap.phase` runs its Python
    only while TensorFlow traces the function, so each new graph it is entered in is one trace
    (its signature the graph's own input signature). The trace itself is not timed. Used as the
    capture's compile record: `end_step(i)` after step i; written on exit where anything traced."""

    def __init__(self, run_dir: Path):
        import weakref
        super().__init__()
        self.run_dir = Path(run_dir)
        self._seen = weakref.WeakSet()

    def seen_tracing(self) -> None:
        """Called inside a tf.function: the outermost graph being traced, once."""
        import tensorflow as tf
        graph = tf.compat.v1.get_default_graph()
        # A tf.cond or while branch is a graph of its own inside the function's.
        while hasattr(getattr(graph, "outer_graph", None), "outer_graph"):
            graph = graph.outer_graph
        if graph in self._seen:
            return
        self._seen.add(graph)
        args, kwargs = getattr(graph, "structured_input_signature", None) or ((), {})
        self.traces.append({"function": graph.name, "step": self.step,
                            "signature": signature_of(tuple(args), dict(kwargs)), "trace_ms": None})

    def end_step(self, step: int) -> None:
        self.step = step + 1

    def __exit__(self, *exc) -> None:
        if not self.traces:
            return
        write_atomic(self.run_dir / COMPILE_JSON, strict_json.dumps({
            "format": FORMAT_VERSION, "framework": "tf", "compiles": [], "graph_breaks": [],
            "tf_traces": self.traces, "tf_tracing_counts": {},
            "unavailable": ["tf.function traces seen through cap.phase inside the function: "
                            "their time is not measured apart (it is in the warm-up excess)"]},
            indent=1))
