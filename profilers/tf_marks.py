"""Phase marks inside TensorFlow graphs: name scopes, which survive tf.function and XLA as op
names (and HLO metadata), where Python-side timers and NVTX ranges would only run at trace time."""
from __future__ import annotations

from gapscope.profilers.phases import check_phase, tf_eager_event_name, tf_scope_name


def tf_phase_scope(phase: str):
    import tensorflow as tf
    return tf.name_scope(tf_scope_name(check_phase(phase)))


def multi_worker(strategy=None) -> bool:
    """Whether the current (or given) tf.distribute strategy spans several workers
    (MultiWorkerMirroredStrategy over a TF_CONFIG cluster of more than one task)."""
    import tensorflow as tf
    strategy = strategy or tf.distribute.get_strategy()
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and getattr(strategy.extended, "_num_workers", 1) > 1)


class TfPhases:
    """`phase(name)` for a raw TensorFlow loop, inside and outside tf.function.

    Inside a traced function only graph constructs survive, so a phase is a name scope.
    Executed eagerly, a phase is host time: a step-timer range plus a TraceMe event
    (profilers.phases.tf_eager_event_name) that the TF profiler records on the host line."""

    def __init__(self, marks):
        import tensorflow as tf
        self._marks = marks
        self._tf = tf

    def phase(self, name: str):
        if self._tf.inside_function():
            return tf_phase_scope(name)
        return _EagerPhase(self._marks.phase(name), self._tf.profiler.experimental.Trace,
                           tf_eager_event_name(name))


class _EagerPhase:
    __slots__ = ("_timed", "_trace_me", "_name", "_active")

    def __init__(self, timed, trace_me, name):
        self._timed, self._trace_me, self._name = timed, trace_me, name
        self._active = None

    def __enter__(self):
        self._timed.__enter__()
        self._active = self._trace_me(self._name)
        self._active.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._active.__exit__(*exc_info)
        return self._timed.__exit__(*exc_info)
