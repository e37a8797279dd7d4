"""One run's life in its directory, for gapscope's run process and the capture API alike: started
`running` with its pid and host, ended exactly once as complete or failed, also on SIGINT/SIGTERM."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

from gapscope.profilers import environment
from gapscope.profilers.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED, GapscopeInputError
from gapscope.profilers.run_dir import Manifest, create_run_dir, mark_failed, write_steps_csv
from gapscope.profilers.written_traces import TF_PROFILER_ABORT, died_stopping_tf_profiler

INTERRUPTED = "interrupted"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The launcher's pid, in its run process's environment: see stop_with_parent.
LAUNCHER_PID_ENV = "GAPSCOPE_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM asked to stop. A KeyboardInterrupt, so that `except Exception` lets it
    through and every place that handles Ctrl-C handles SIGTERM the same way."""

    def __init__(self, signum: int = signal.SIGINT, detail: str = ""):
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name + (f"; {detail}" if detail else ""))

    @property
    def exit_code(self) -> int:
        """128 + the signal, as a shell reports a process the signal ended (130, 143)."""
        return 128 + self.signum


def exit_code_of(exc: BaseException) -> int:
    if isinstance(exc, Interrupted):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    return EXIT_BAD_INPUT if isinstance(exc, GapscopeInputError) else EXIT_RUN_FAILED


class StopRequest:
    """The stop signal signals_interrupt received, if one came."""

    def __init__(self):
        self.signum: int | None = None

    def behind(self, exc: BaseException) -> BaseException:
        """`exc`, or the Interrupted behind it. A handler that raises while a C extension runs
        Python code can come out as that library's own error: TensorFlow's pybind11 turned it
        into `RuntimeError: ... REPLACED BY Interrupted: SIGTERM` (a TF worker stopped while its
        collective broke); Ray's wait turns it into a bare KeyboardInterrupt, without the signal.
        Once asked to stop, the run was stopped, whatever error followed."""
        if self.signum is None or isinstance(exc, Interrupted):
            return exc
        return Interrupted(self.signum)


@contextmanager
def signals_interrupt():
    """Inside, SIGINT and SIGTERM raise Interrupted: without it SIGTERM kills the process before
    it can record how its run ended. The first signal is the one that counts; later ones are
    ignored so that they cannot cut the recording of the end short. Handlers can only be set
    in the main thread; elsewhere this does nothing. Yields the StopRequest."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def stop(signum, frame):
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        request.signum = signum
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield request
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def stop_signals_deferred():
    """SIGINT and SIGTERM held back while a failure is being recorded, raised again after: a
    signal that lands there (torchrun stops the other ranks the moment one dies, while they
    record the broken collective) would otherwise cut the recording short and leave the run
    `running`. Handlers, not the signal mask: a signal already caught at C level still runs
    its Python handler later. Nests; main thread only (elsewhere it holds nothing back)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: held.append(signum))
                for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])  # the first one counts, as in signals_interrupt


def stop_with_parent() -> None:
    """A SIGTERM to this run process when its launcher dies, even by SIGKILL (which the launcher
    cannot forward): the run then records `failed: interrupted` instead of training on, orphaned,
    with nobody to read its end. Linux only (prctl); elsewhere the stale-pid check still tells."""
    expected = os.environ.get(LAUNCHER_PID_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(expected):  # it died before the prctl: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)


class RunLifecycle:
    """A run directory's manifest from start to end. The end is recorded once: complete with its
    steps, or failed with the error (`interrupted` for a signal), so a half-written run is never
    mistaken for a finished one. A process killed outright (SIGKILL, power) cannot record its
    end: the pid and host in the manifest let `run_dir.effective_status` tell later."""

    # The status of a run that ended before its work did: a capture's steps are the user's loop
    # as far as it got, so UserRun says `interrupted`; gapscope's own runs did not do their job.
    stopped_status = "failed"

    def __init__(self, run_dir: Path, manifest: Manifest):
        self.run_dir, self.manifest = run_dir, manifest
        self.finished = manifest.status != "running"

    @classmethod
    def create(cls, out_dir: str | Path, id_parts: tuple[str, ...], fields: dict) -> "RunLifecycle":
        """A new run directory under `out_dir`, its manifest saying `running`."""
        return cls.start(create_run_dir(out_dir, *id_parts), fields)

    @classmethod
    def start(cls, run_dir: Path, fields: dict) -> "RunLifecycle":
        """The manifest of a run in a directory made for it (by the launcher, for a child)."""
        return cls(run_dir, Manifest.start(run_dir, {
            "run_id": run_dir.name, **fields, "host": environment.host(), "pid": os.getpid()}))

    @classmethod
    def reopen(cls, run_dir: Path) -> "RunLifecycle":
        """The run as its process left it, for the launcher to record an end it did not."""
        return cls(run_dir, Manifest.reopen(run_dir))

    @property
    def status(self) -> str | None:
        return self.manifest.status

    @property
    def error(self) -> str | None:
        return self.manifest.data.get("error")

    def complete(self, rows: list[dict], facts: dict) -> str | None:
        """Records the steps and the end. The views of the run (TensorBoard summaries, XSpace) are
        the runner's to write (workloads.runners.after_run.RunWithViews): None here. Signals
        wait until the end is written and known to be: a Ctrl-C between the manifest's
        `complete` and `finished` (a busy machine widened it) turned a run that had ended
        into `failed: interrupted`."""
        with stop_signals_deferred():
            self._record(rows, facts)
            self.manifest.finish()
            self.finished = True
        return None

    def fail(self, rows: list[dict] | None, facts: dict, exc: BaseException) -> bool:
        """Records the failure with what the run got done before it (the steps show how far
        it got). Never raises for a full disk: returns False when even the manifest could not
        be written, which leaves it `running` for effective_status to read as interrupted."""
        with stop_signals_deferred():
            if self.finished:
                return True
            if isinstance(exc, KeyboardInterrupt):
                error = INTERRUPTED
                extra = ({"stopped_by": signal.Signals(exc.signum).name}
                         if isinstance(exc, Interrupted) else {})
            elif isinstance(exc, GapscopeInputError):
                error, extra = str(exc) or type(exc).__name__, {}
            else:
                error = f"{type(exc).__name__}: {exc}"
                extra = {"traceback": "".join(traceback.format_exception(exc))}
            try:
                self._record(rows, facts, **extra)
            except OSError:
                pass  # the steps or the facts could not be written; the end still matters most
            return self.end_unrecorded(error)

    def end_unrecorded(self, error: str) -> bool:
        """Fails the run with `error` unless its end is recorded already (the launcher's part,
        when the run process died without a word). False if the manifest could not be written.
        A process that died inside TensorFlow's profiler stop is said to have, unless stopped."""
        if error != INTERRUPTED and died_stopping_tf_profiler(self.run_dir):
            error = TF_PROFILER_ABORT
        if self.status != "running":
            self.finished = True
            return True
        try:
            self.manifest.finish(error=error, status=self.stopped_status)
        except OSError as exc:
            # A full disk: the manifest stays `running`; the marker keeps the cause for readers.
            mark_failed(self.run_dir, f"{error} (the manifest could not be updated: "
                                      f"{exc.strerror or exc})")
            return False
        self.finished = True
        return True

    def _record(self, rows: list[dict] | None, facts: dict, **extra) -> None:
        if rows is not None:
            write_steps_csv(self.run_dir, rows)
        self.manifest.update(**facts, **extra, versions=environment.versions(),
                             final_loss=rows[-1]["loss"] if rows else None)
