"""Records what JAX traced and compiled during a run, step by step, from its own monitoring events
(jaxpr trace, MLIR lowering, XLA backend compile per function) and its cache-miss explanations
(why a function traced again), for compile.json."""
from __future__ import annotations

import logging
from pathlib import Path

from gapscope.profilers import strict_json
from gapscope.profilers.run_dir import COMPILE_JSON, write_atomic

FORMAT_VERSION = 1
# JAX's duration events (jax._src.dispatch) and the stage each times: disjoint, one after another.
STAGE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "jax_trace",
                "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
                "/jax/core/compile/backend_compile_duration": "xla_compile"}
# jax_explain_cache_misses logs its "TRACING CACHE MISS" explanations here, as warnings.
_EXPLAIN_LOGGER = "jax._src.interpreters.partial_eval"
_REASON_CHARS = 200


class JaxCompileLog:
    """`start()` before the first step, `stop()` after the last; `step_of()` says the update
    in progress at each event (the step callback's), None between steps: what compiles there
    (fit's set-up, Keras' end-of-fit metrics) costs no step, and keeps step None."""

    def __init__(self, step_of):
        self.step_of = step_of
        self.events: list[dict] = []
        self.misses: list[dict] = []
        self._handler = _Misses(self)
        self._explained = None
        self._propagate = True

    def _on_duration(self, event: str, duration_secs: float, **kwargs) -> None:
        stage = STAGE_EVENTS.get(event)
        if stage is not None:
            self.events.append({"stage": stage, "function": str(kwargs.get("fun_name") or "?"),
                                "step": self.step_of(), "ms": round(duration_secs * 1000.0, 3)})

    def start(self) -> None:
        import jax
        from jax import monitoring
        monitoring.register_event_duration_secs_listener(self._on_duration)
        self._explained = jax.config.jax_explain_cache_misses
        jax.config.update("jax_explain_cache_misses", True)
        logger = logging.getLogger(_EXPLAIN_LOGGER)
        logger.addHandler(self._handler)
        # The explanations are for compile.json, not the run's output: this logger says nothing else.
        self._propagate, logger.propagate = logger.propagate, False

    def stop(self) -> None:
        import jax
        from jax import monitoring
        monitoring.unregister_event_duration_listener(self._on_duration)
        jax.config.update("jax_explain_cache_misses", self._explained)
        logger = logging.getLogger(_EXPLAIN_LOGGER)
        logger.removeHandler(self._handler)
        logger.propagate = self._propagate

    def write(self, run_dir: Path) -> None:
        import jax
        write_atomic(Path(run_dir) / COMPILE_JSON, strict_json.dumps({
            "format": FORMAT_VERSION, "framework": "jax", "jax": jax.__version__,
            "compiles": [], "graph_breaks": [], "jax_events": self.events,
            "jax_cache_misses": self.misses,
            "unavailable": ["Keras' own Python around the jitted step (building its train function, "
                            "the first call's variable setup) is not timed apart: it is in the "
                            "unattributed rest"]}, indent=1))


class _Misses(logging.Handler):
    """Keeps each cache-miss explanation JAX logs (with the step it came at), unprinted."""

    def __init__(self, log: JaxCompileLog):
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        lines = record.getMessage().splitlines()
        if not lines or not lines[0].startswith("TRACING CACHE MISS"):
            return
        # "  never seen function:" then "    <name> id=…", or "  for <name> defined at …" then
        # "  all previously seen cache keys differ…" and the closest key's differences.
        body = [line.strip() for line in lines[1:] if line.strip()]
        first = bool(body) and body[0].startswith("never seen function")
        if first:
            function = body[1].split()[0] if len(body) > 1 else None
            reason = None
        else:
            function = body[0][4:].split(" defined at", 1)[0] if body and body[0].startswith("for ") else None
            reason = " ".join(line for line in body[2:]) or None
        self._log.misses.append({"function": function, "step": self._log.step_of(), "first": first,
                                 "reason": reason[:_REASON_CHARS] if reason else None})
