"""Measures what gapscope's phase marks cost the mlp training step in timer mode (no profiler running)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.phases import torch_range_name
from gapscope.profilers.timers import HostClock, StepTimer
from gapscope.workloads.data import synthetic_classification
from gapscope.workloads.registry import get_workload

MAX_SLOWDOWN_PCT = 2.0
TIGHT_LOOP_CALLS = 200_000
STEP_PHASES = ("data_load", "optimizer", "forward", "backward", "optimizer")  # as torch_runner


@dataclass
class TrainingLoop:
    """The loop of workloads/runners/torch_runner.py on the CPU, with the same model, data and optimizer.
    One round is one epoch; its step times are in nanoseconds, taken around the whole step."""

    loader: object
    model: object
    optimizer: object
    loss_fn: object
    device: object

    def bare_round(self) -> list[int]:
        # The step body is written out in both rounds on purpose: a no-op marks object would
        # itself cost calls, and the bare loop must carry none.
        clock, times, batches = time.perf_counter_ns, [], iter(self.loader)
        for _ in range(len(self.loader)):
            start = clock()
            inputs, targets = next(batches)
            inputs = inputs.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.model(inputs), targets)
            loss.backward()
            self.optimizer.step()
            times.append(clock() - start)
        return times

    def marked_round(self, marks: PhaseMarks) -> list[int]:
        clock, times, batches = time.perf_counter_ns, [], iter(self.loader)
        for _ in range(len(self.loader)):
            start = clock()
            marks.begin_step()
            with marks.phase("data_load"):
                inputs, targets = next(batches)
                inputs = inputs.to(self.device, non_blocking=True)
                targets = targets.to(self.device, non_blocking=True)
            with marks.phase("optimizer"):
                self.optimizer.zero_grad(set_to_none=True)
            with marks.phase("forward"):
                loss = self.loss_fn(self.model(inputs), targets)
            with marks.phase("backward"):
                loss.backward()
            with marks.phase("optimizer"):
                self.optimizer.step()
            marks.end_step(loss)
            times.append(clock() - start)
        return times


def build_loop(steps_per_round: int) -> TrainingLoop:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    spec = get_workload("mlp")
    torch.manual_seed(spec.seed)
    x, y = synthetic_classification(spec.batch_size * steps_per_round, spec.input_shape,
                                    spec.num_classes, spec.seed)
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=spec.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(spec.seed))
    model = spec.builders().build_torch(spec)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=spec.learning_rate)
    return TrainingLoop(loader, model, optimizer, torch.nn.CrossEntropyLoss(), torch.device("cpu"))


def interleaved_rounds(loop: TrainingLoop, rounds: int) -> list[tuple[list[int], list[int]]]:
    """(bare, marked) step times of each pair of rounds; the order within a pair alternates so
    that drift of the machine (clock boost, a neighbour's load) falls on both alike."""
    loop.bare_round(), loop.marked_round(PhaseMarks())  # warm-up: allocator, caches, lazy init
    pairs = []
    for i in range(rounds):
        if i % 2:
            marked = loop.marked_round(PhaseMarks())
            bare = loop.bare_round()
        else:
            bare = loop.bare_round()
            marked = loop.marked_round(PhaseMarks())
        pairs.append((bare, marked))
    return pairs


def slowdown_pct(pairs) -> float:
    """Median over pairs of the marked/bare ratio of round medians: pairing cancels what changes
    slowly on a shared machine, the median ignores a pair that a burst of load hit."""
    ratios = [statistics.median(marked) / statistics.median(bare) for bare, marked in pairs]
    return 100.0 * (statistics.median(ratios) - 1.0)


def per_call_us(body, calls: int = TIGHT_LOOP_CALLS) -> float:
    """Cost of one `body()` call in a tight loop, less the loop's own cost."""
    empty = _loop_seconds(lambda: None, calls)
    return (_loop_seconds(body, calls) - empty) / calls * 1e6


def _loop_seconds(body, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        body()
    return time.perf_counter() - start


def mark_cost_us() -> float:
    """One phase range (enter + exit) of PhaseMarks, timer mode."""
    marks = PhaseMarks(StepTimer(HostClock()))
    marks.begin_step()
    phase = marks.phase("forward")

    def body():
        with phase:
            pass
    return per_call_us(body)


def step_marks_cost_us() -> float:
    """All marks of one step of the runner: begin_step, five phase ranges, end_step(loss)."""
    import torch
    marks, loss = PhaseMarks(StepTimer(HostClock())), torch.ones(())
    phases = [marks.phase(p) for p in STEP_PHASES]

    def body():
        marks.begin_step()
        for phase in phases:
            with phase:
                pass
        marks.end_step(loss)
    return per_call_us(body, TIGHT_LOOP_CALLS // 5)


def record_function_cost_us() -> float:
    """One record_function range with no profiler running: what marks skip by checking first."""
    from torch.profiler import record_function
    name = torch_range_name("forward")

    def body():
        with record_function(name):
            pass
    return per_call_us(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="bare/marked pairs (default %(default)s)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (default %(default)s)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)

    import torch
    loop = build_loop(args.steps)
    pairs = interleaved_rounds(loop, args.rounds)
    bare_ms = statistics.median(t for bare, _ in pairs for t in bare) / 1e6
    marked_ms = statistics.median(t for _, marked in pairs for t in marked) / 1e6
    slowdown = slowdown_pct(pairs)
    step_us = step_marks_cost_us()
    print(f"mlp training step on the CPU, {torch.get_num_threads()} torch threads: "
          f"{args.rounds} interleaved pairs of rounds x {args.steps} steps")
    print(f"  bare step (no marks)              median {bare_ms:8.4f} ms")
    print(f"  marked step (PhaseMarks, timers)  median {marked_ms:8.4f} ms")
    print(f"  slowdown, median over pairs       {slowdown:+8.2f} %   target <= {MAX_SLOWDOWN_PCT} %")
    print("tight loops, no profiler running:")
    print(f"  one phase mark (enter + exit)     {mark_cost_us():8.2f} us")
    print(f"  all marks of one step             {step_us:8.2f} us   "
          f"= {100 * step_us / 1e3 / bare_ms:.2f} % of the bare step")
    print(f"  one record_function (enter+exit)  {record_function_cost_us():8.2f} us   "
          "why marks enter it only while a profiler records")
    if args.no_check or slowdown <= MAX_SLOWDOWN_PCT:
        return 0
    print(f"slowdown above {MAX_SLOWDOWN_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
