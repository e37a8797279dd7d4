"""Measures what gapscope's Keras instrumentation (marked train_step, step callback) costs a Keras mlp step, in one process."""
from __future__ import annotations

# Usage: python -m benchmarks.keras_marks_overhead [--rounds 16] [--steps 200] [--jit] [--no-check]
#
# Fresh processes differ by several % on this machine (process_spread), more than the cost
# looked for here, so the arms share one process: one Keras model per arm, same architecture,
# data and optimizer, each compiled once, and `fit` rounds of the arms alternate (the order
# rotated every round). Arms:
#   bare      Keras' own train_step, timed by benchmarks/plain_loops.py's callback
#   step      gapscope's marked train_step (profilers/keras_marks.py), the bare callback
#   gapscope  the marked train_step and gapscope's step callback with its StepTimer, as
#             workloads/runners/keras_runner.py runs them (no trace window)
# Each arm's slowdown is the median over rounds of the ratio of its round median to the bare
# round's median: pairing cancels what the machine does slowly, the median a round a burst hit.

import argparse
import os
import statistics
import sys

from benchmarks.plain_loops import step_times_callback
from gapscope.profilers.keras_marks import mark_keras_phases, step_callback
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.timers import HostClock, StepTimer
from gapscope.workloads.registry import get_workload

ARMS = ("bare", "step", "gapscope")
MAX_SLOWDOWN_PCT = 2.0


class Arm:
    """One model and how its steps are timed."""

    def __init__(self, name: str, jit: bool, spec):
        import keras
        from gapscope.workloads.runners.keras_runner import keras_loss, keras_optimizer

        self.name = name
        self.model = spec.builders().build_keras(spec)
        self.timer = StepTimer(HostClock())
        if name != "bare":
            mark_keras_phases(self.model, PhaseMarks(self.timer, uses_torch=False))
        self.model.compile(optimizer=keras_optimizer(keras, spec), loss=keras_loss(keras, spec),
                           jit_compile=jit, steps_per_execution=1)
        self.callback = (step_callback(self.timer, None) if name == "gapscope"
                         else step_times_callback())

    def round_ms(self, x, y, batch_size: int) -> list[float]:
        """One fit of len(x) / batch_size steps; each step's time, as its callback took it."""
        before = len(self.timer)
        self.model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=True, verbose=0,
                       callbacks=[self.callback])
        if self.name == "gapscope":
            return [row["step_ms"] for row in self.timer.rows(timed_phases=())[before:]]
        times, self.callback.times_ns = self.callback.times_ns, []
        return [t / 1e6 for t in times]


def interleaved_rounds(arms: list[Arm], x, y, batch_size: int, rounds: int) -> list[dict]:
    """{arm: round median ms} per round; every arm runs once per round, the order rotated so
    that no arm always follows the same one."""
    for arm in arms:  # warm-up: tracing, the first steps' allocations
        arm.round_ms(x, y, batch_size)
    results = []
    for i in range(rounds):
        order = arms[i % len(arms):] + arms[:i % len(arms)]
        results.append({arm.name: statistics.median(arm.round_ms(x, y, batch_size))
                        for arm in order})
    return results


def slowdown_pct(results: list[dict], arm: str) -> float:
    return 100.0 * (statistics.median(r[arm] / r["bare"] for r in results) - 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200, help="steps per fit round")
    parser.add_argument("--jit", action="store_true", help="jit_compile=True (XLA)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = "tensorflow"  # fixed when Keras is first imported
    import keras
    from gapscope.workloads.data import synthetic_classification

    spec = get_workload("mlp")
    keras.utils.set_random_seed(spec.seed)
    x, y = synthetic_classification(spec.batch_size * args.steps, spec.input_shape,
                                    spec.num_classes, spec.seed)
    arms = [Arm(name, args.jit, spec) for name in ARMS]
    results = interleaved_rounds(arms, x, y, spec.batch_size, args.rounds)
    print(f"Keras mlp step on the CPU{' (jit_compile)' if args.jit else ''}: {args.rounds} "
          f"rounds x {args.steps} steps per arm, arms interleaved in one process")
    worst = 0.0
    for name in ARMS:
        median_ms = statistics.median(r[name] for r in results)
        line = f"  {name:9s} median {median_ms:8.4f} ms"
        if name != "bare":
            slowdown = slowdown_pct(results, name)
            worst = max(worst, slowdown)
            line += f"   {slowdown:+6.2f} % against bare"
        print(line)
    if args.no_check or worst <= MAX_SLOWDOWN_PCT:
        return 0
    print(f"slowdown above {MAX_SLOWDOWN_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
