"""Phase marks inside TensorFlow graphs: name scopes, which survive tf.function and XLA as op
names (and HLO metadata), where Python-side timers and NVTX ranges would only run at trace time."""
from __future__ import annotations

from profilers.phases import check_phase, tf_scope_name


def tf_phase_scope(phase: str):
    import tensorflow as tf
    return tf.name_scope(tf_scope_name(check_phase(phase)))
