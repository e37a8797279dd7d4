"""Per-step phase timers: perf_counter on the host, CUDA events on a GPU, read only after the run."""
from __future__ import annotations

import os
import resource
import time

from gapscope.profilers.phases import MARKED_PHASES


class HostClock:
    """Wall-clock marks; on a CPU the work is done when the call returns, so host time is step time."""

    mark = staticmethod(time.perf_counter_ns)  # a builtin: the cheapest call Python has

    @staticmethod
    def keep_loss(loss):
        """Read at once: on the CPU a tensor's value is ready, and holding every step's loss
        tensor instead measurably slows a 1.4 ms step (the allocator cannot reuse its memory)."""
        return _as_float(loss)

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6

    def resolve(self) -> None:
        pass

    @staticmethod
    def ready(mark) -> bool:
        return True


class CudaEventClock:
    """CUDA events recorded on the current stream: they time the device's work without a
    synchronize inside the step; all are read once, after the last step."""

    def __init__(self):
        import torch
        self._new_event = torch.cuda.Event
        self._synchronize = torch.cuda.synchronize

    @staticmethod
    def keep_loss(loss):
        """Kept as a detached device tensor: reading it now would wait for the step to finish."""
        return loss.detach() if hasattr(loss, "detach") else loss

    def mark(self):
        event = self._new_event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def elapsed_ms(start, end) -> float:
        return start.elapsed_time(end)

    def resolve(self) -> None:
        self._synchronize()

    @staticmethod
    def ready(event) -> bool:
        """Whether the device has reached `event`: then it and every earlier event on the stream
        can be read without a synchronize."""
        return event.query()


class StepTimer:
    """Collects, per step, the time of each marked phase and of the whole step.

    Marks are kept raw (timestamps or events) in flat lists and turned into milliseconds in
    `rows()`, so the hot path is a clock read and a list append per boundary."""

    # The timer this process made last: a progress reporter counts its steps from another
    # thread (len() of a list) instead of adding work to the hot path.
    latest: "StepTimer | None" = None

    def __init__(self, clock=None):
        StepTimer.latest = self
        self.clock = clock or HostClock()
        self.now = self.clock.mark
        self._keep_loss = self.clock.keep_loss
        # (phase, start, end) for every phase range of the run, in order.
        self.phase_marks: list[tuple[str, object, object]] = []
        self.add_phase = self.phase_marks.append
        # (first phase mark index, start, end, loss, minor page faults, resident pages) per step.
        self._steps: list[tuple[int, object, object, object, int, int | None]] = []
        self._step_begin: tuple[int, object] | None = None
        # The page-fault counter at the last step's end: one reading a step (a system call, 0.44 µs),
        # so a step's faults run from the end of the one before, as a Keras step's time does.
        self._faults_at_end: int | None = None

    def begin_step(self) -> None:
        self._step_begin = (len(self.phase_marks), self.now())
        if self._faults_at_end is None:
            self._faults_at_end = _minor_faults()

    def begin_step_at(self, start) -> None:
        """Begin a step at an earlier mark (work between two calls that belongs to the next)."""
        self._step_begin = (len(self.phase_marks), start)
        if self._faults_at_end is None:
            self._faults_at_end = _minor_faults()

    def end_step(self, loss=None) -> None:
        """loss may be a tensor; on a GPU it is read after the run, so it never stalls a step."""
        end = self.now()
        faults, before = _minor_faults(), self._faults_at_end
        self._faults_at_end = faults
        first, start = self._step_begin
        self._steps.append((first, start, end, self._keep_loss(loss), faults - before, _RESIDENT()))

    def __len__(self) -> int:
        return len(self._steps)

    def rows(self, timed_phases=MARKED_PHASES, first_step: int = 0, resolve: bool = True) -> list[dict]:
        """One dict per step from `first_step` with step_ms, <phase>_ms for the phases this timer
        saw, and loss. resolve=False: the caller knows the device has reached these steps' marks
        (`ready_steps`), so the clock need not synchronize."""
        if resolve:
            self.clock.resolve()
        elapsed = self.clock.elapsed_ms
        bounds = [first for first, *_ in self._steps[first_step + 1:]] + [len(self.phase_marks)]
        rows = []
        for number, ((first, start, end, loss, faults, pages), last) in enumerate(
                zip(self._steps[first_step:], bounds), start=first_step):
            row = {"step": number, "step_ms": elapsed(start, end)}
            row.update({f"{phase}_ms": 0.0 for phase in timed_phases})
            for phase, phase_start, phase_end in self.phase_marks[first:last]:
                row[f"{phase}_ms"] += elapsed(phase_start, phase_end)
            row["loss"] = _as_float(loss)
            row["minor_faults"] = faults
            row["rss_mb"] = None if pages is None else round(pages * _PAGE_BYTES / 1e6, 3)
            rows.append(row)
        return rows


    def all_ready(self) -> bool:
        """Whether every step can be read now without waiting: always on the host; on a GPU once
        the device has reached the last step's end (its loss is then ready too)."""
        return not self._steps or self.clock.ready(self._steps[-1][2])


def _minor_faults() -> int:
    """The process's minor page faults so far, every thread's: each is a fresh page the kernel
    had to map (and zero) for memory the allocator took back from it. Counted per step because
    a CPU step that frees its memory to the kernel pays for it again on the next step, and
    that alone moved torch's CNN step by 19 % (benchmarks/README.md). One getrusage call,
    0.44 µs here."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _ResidentPages:
    """The process's resident pages now, read from /proc/self/statm through a descriptor kept
    open: one pread a step (no open, no Python file object), so the step pays a system call,
    as for the page faults. None where the system has no /proc (macOS): RSS is then not kept."""

    def __init__(self):
        self._pid, self._fd = None, None
        self._open()

    def _open(self) -> None:
        # /proc/self is resolved when opened: a forked child inherits its parent's statm.
        self._pid = os.getpid()
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self._fd = None

    def __call__(self) -> int | None:
        if self._pid != os.getpid():
            self._open()
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 64, 0).split(None, 2)[1])
        except (OSError, ValueError, IndexError):
            return None


# One descriptor for the process; a forked child opens its own (see _open).
_RESIDENT = _ResidentPages()
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float | None:
    """The process's resident memory now, in MB (10^6 bytes), as steps.csv's rss_mb; None
    without /proc. Read by the runners right after the framework's import, before the model
    is built: the framework's own footprint, which compare --memory keeps apart."""
    pages = _RESIDENT()
    return None if pages is None else round(pages * _PAGE_BYTES / 1e6, 3)


def _as_float(loss) -> float | None:
    if loss is None:
        return None
    if hasattr(loss, "item"):
        return float(loss.detach().item()) if hasattr(loss, "detach") else float(loss.item())
    return float(loss)
