"""Runs TensorBoard (with gapscope's plugin) over a traces folder and asks its profiler plugins
which runs they list."""
from __future__ import annotations

import gzip
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Mapping

from gapscope.analysis.readers.safe_files import unreadable_under
from gapscope.analysis.tensorboard.shadow import SOURCE_LOGDIR_ENV, ShadowLogdir
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.environment import importing_this_gapscope

# Run-listing endpoint of each plugin gapscope writes traces for.
PLUGIN_RUNS = {
    "pytorch_profiler": "/data/plugin/pytorch_profiler/runs",
    "profile": "/data/plugin/profile/runs",
}
# Panes of third-party plugins that load their charts from CDNs and never render offline
# (checked in headless Chromium without a network, tests/test_tensorboard_browser.py).
ONLINE_ONLY = {
    "pytorch_profiler": "torch-tb-profiler's tab (every view: Overview, Operator, Trace; it "
                        "spins on 'google is not defined')",
    "profile": "XProf's Overview step-time graph (Google Charts)",
}
# torch-tb-profiler shows nothing offline and is no longer maintained: loaded only when asked,
# by `gapscope tensorboard --with-torch-tb-profiler` (this variable, read in TensorBoard's process).
TORCH_TB_PROFILER, TORCH_TB_PROFILER_ENV = "pytorch_profiler", "GAPSCOPE_TORCH_TB_PROFILER"
TORCH_TB_PROFILER_OFF = ("torch-tb-profiler's tab is off: offline it never renders (Overview, "
                         "Operator and Trace spin on 'google is not defined'); "
                         "`gapscope tensorboard --with-torch-tb-profiler` turns it on")
# What XProf's tab (PROFILE) shows of gapscope's runs.
XPROF_NOTE = ("XProf (the PROFILE tab): each run's session 'gapscope' holds its trace with "
              "gapscope's Steps and phase lines above the threads; Trace Viewer draws it offline, "
              "the Overview page's step-time graph needs the internet")
# The tab TensorBoard opens on from the URL gapscope prints.
LANDING_TAB = "gapscope"
_URL_LINE = re.compile(r"TensorBoard \S+ at (http\S+) \(Press CTRL\+C")
# Requests only ever go to the server we started: never through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Address space of TensorBoard and each process it starts, in GiB: a plugin that reads runaway
# input fails with MemoryError instead of taking the machine. TensorBoard with TensorFlow and
# torch-tb-profiler maps about 1.7 GiB of it before reading anything (its worker 0.4).
MEMORY_ENV = "GAPSCOPE_TENSORBOARD_MAX_GIB"
DEFAULT_MEMORY_GIB = 6


# Files the plugins open: torch-tb-profiler's traces, the profile plugin's XSpaces, event files.
_PLUGIN_FILES = re.compile(r"\.pt\.trace\.json(\.gz)?$|\.xplane\.pb$|tfevents")


def refuse_unreadable_traces(logdir: Path) -> None:
    """A FIFO named like a trace hangs a plugin forever and a link to /dev/zero fills memory
    (10 GB seen): TensorBoard reads them itself, so they are refused before it starts."""
    bad = unreadable_under(logdir, _PLUGIN_FILES)
    if bad:
        path, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise GapscopeInputError(f"{path}: cannot read ({why}){more}; TensorBoard's plugins would "
                                 "hang or exhaust memory on it: remove it")


class TensorBoardError(RuntimeError):
    """TensorBoard did not start, exited, or did not list the expected runs in time."""


def check_address(host: str, port: int | None) -> None:
    """Refuses, before TensorBoard starts, a host that is no address here or a port in use:
    one line, exit 2, rather than a server that dies with the reason in its log."""
    try:
        infos = socket.getaddrinfo(host, port or None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        raise GapscopeInputError(f"--host {host!r}: not an address "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
    family, kind, proto, _, address = infos[0]
    if port:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard binds
            try:
                probe.bind(address)
            except OSError as exc:
                raise GapscopeInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                                         "(--port 0 picks a free port)") from None


class TensorBoardServer:
    """One TensorBoard process over `logdir`: `with TensorBoardServer(d) as tb: tb.url`."""

    def __init__(self, logdir: str | Path, host: str = "127.0.0.1", port: int | None = None,
                 ready_timeout: float = 60.0, torch_tb_profiler: bool = False):
        self.logdir = Path(logdir).resolve()
        if not self.logdir.is_dir():
            raise GapscopeInputError(f"not a directory: {logdir}")
        refuse_unreadable_traces(self.logdir)
        self.memory_limit = memory_limit_bytes()
        self.host, self.port, self.ready_timeout = host, port, ready_timeout
        self.torch_tb_profiler = torch_tb_profiler
        self.url: str | None = None
        self.plugins: list[str] = []
        self._process: subprocess.Popen | None = None
        self._log: Path | None = None
        self._shadow: ShadowLogdir | None = None

    def start(self) -> str:
        """Starts the server and returns its URL once it answers with its plugins loaded."""
        fd, log = tempfile.mkstemp(prefix="gapscope-tensorboard-", suffix=".log")
        self._log = Path(log)
        # The child imports the gapscope this process runs, its plugin included.
        env = importing_this_gapscope(dict(os.environ))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # A subprocess rather than tensorboard.program in-process: the plugins start threads
        # and worker processes that only a process-group kill can stop, and TensorFlow stays
        # out of the caller. Port 0 lets the OS pick a free port with no race; the legacy
        # loader avoids a second (data server) process. The launcher adds gapscope's plugin
        # to TensorBoard's own and the installed ones.
        # The plugins read a shadow of the logdir that holds only files vetted now and on every
        # refresh (the check above runs once); gapscope's plugin reads the logdir itself.
        self._shadow = ShadowLogdir(self.logdir).start()
        env[SOURCE_LOGDIR_ENV] = str(self.logdir)
        env[TORCH_TB_PROFILER_ENV] = "1" if self.torch_tb_profiler else "0"
        command = [sys.executable, "-m", "gapscope.analysis.tensorboard.main",
                   "--logdir", str(self._shadow.path),
                   "--host", self.host, "--port", str(self.port or 0), "--load_fast", "false"]
        limit = self.memory_limit
        with os.fdopen(fd, "w") as out:
            self._process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env,
                                             start_new_session=True,
                                             preexec_fn=lambda: _limit_memory(limit))
        try:
            self.url = self._wait_for_url()
            self.plugins = wait_until_ready(self.url, self._process, self.ready_timeout)
        except TensorBoardError as error:
            tail = self.log_tail()
            self.stop()
            raise TensorBoardError(f"{error}\n{tail}") from None
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self, timeout: float = 2.0) -> None:
        """Ends TensorBoard and every process it started; safe to call twice. TensorBoard only
        reads the logdir, so nothing is lost when it is killed: a SIGTERM not obeyed within
        `timeout` (busy plugin threads kept it up 7 s) is followed by SIGKILL."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)  # TensorBoard exits cleanly on SIGTERM
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait()
            # Plugin worker processes may outlive the leader; they share its group.
            _signal_group(process.pid, signal.SIGKILL)
        shadow, self._shadow = self._shadow, None
        if shadow is not None:
            shadow.stop()
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    @property
    def landing_url(self) -> str | None:
        """The URL that opens TensorBoard on gapscope's tab rather than on Time Series."""
        return self.url and f"{self.url.rstrip('/')}/#{LANDING_TAB}"

    @property
    def pid(self) -> int | None:
        """The TensorBoard process, also the id of its process group; None when stopped."""
        return self._process.pid if self._process else None

    def wait(self) -> int:
        """Blocks until the server exits (the CLI's foreground mode); returns its exit code."""
        return self._process.wait() if self._process else 0

    def log_tail(self, lines: int = 20) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            match = _URL_LINE.search(self._log.read_text(errors="replace"))
            if match:
                return match.group(1)
            _raise_if_exited(self._process)
            time.sleep(0.2)
        raise TensorBoardError(f"TensorBoard printed no URL within {self.ready_timeout:.0f} s")

    def __enter__(self) -> "TensorBoardServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_forever(logdir: str | Path, host: str = "127.0.0.1", port: int | None = None,
                  announce: Callable[[str], None] = print,
                  warn: Callable[[str], None] = print, torch_tb_profiler: bool = False) -> int:
    """Foreground mode for `gapscope tensorboard`: announces the URL, runs until Ctrl-C or
    SIGTERM; either stops the server it started (its own process group: a signal to this
    process alone would leave it running)."""
    if not is_loopback(host):
        warn(f"warning: TensorBoard listens on {host}: anyone who can reach this machine on the "
             "network can read these profiles (model, paths, host names); use 127.0.0.1 unless "
             "you mean to share them")
    server = TensorBoardServer(logdir, host, port, torch_tb_profiler=torch_tb_profiler)
    # Signal handlers can only be set from the main thread (the CLI's).
    handle = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if handle else None
    try:
        server.start()
        note = offline_note(server.plugins)
        if note:
            warn(note)
        announce(server.landing_url)
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        if handle:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; any other name or address reaches the network."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def offline_note(plugins: Iterable[str]) -> str | None:
    """One line naming the loaded panes that need the internet, or None."""
    plugins = set(plugins)
    online = [ONLINE_ONLY[p] for p in sorted(ONLINE_ONLY) if p in plugins]
    if not online:
        return None
    offline = "gapscope's tab, Scalars, Text" + (" and XProf's Trace Viewer" if "profile" in plugins
                                                 else "")
    return (f"offline: {'; '.join(online)} need the internet and stay blank without it; "
            f"{offline} work offline")


def tab_notes(torch_tb_profiler: bool) -> list[str]:
    """What gapscope's tab says about the profiler tabs beside it: what they show offline."""
    torch = (f"{ONLINE_ONLY[TORCH_TB_PROFILER]} needs the internet and stays blank without it"
             if torch_tb_profiler else TORCH_TB_PROFILER_OFF)
    return [torch, XPROF_NOTE]


def wait_until_ready(url: str, process: subprocess.Popen | None = None,
                     timeout: float = 60.0) -> list[str]:
    """Waits until the server answers, returns the names of the plugins that loaded."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None:
            _raise_if_exited(process)
        try:
            return sorted(_get_json(url, "/data/plugins_listing"))
        except OSError as error:  # refused, reset, HTTP errors (URLError is an OSError)
            if time.monotonic() >= deadline:
                raise TensorBoardError(f"{url} did not answer within {timeout:.0f} s: "
                                       f"{error}") from error
        time.sleep(0.2)


def listed_runs(url: str) -> dict[str, list[str]]:
    """Run directories (relative to the logdir) each profiler plugin lists now.

    A plugin that did not load has no key. The profile plugin names a run
    `<run dir>/<session>`; the session part is dropped so both plugins speak of run
    directories ('.' is the logdir itself).
    """
    listed = {}
    for plugin, route in PLUGIN_RUNS.items():
        try:
            data = _get_json(url, route)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                continue
            raise
        if plugin == "pytorch_profiler":
            listed[plugin] = sorted(data["runs"])
        else:
            listed[plugin] = sorted({run.rstrip("/").rpartition("/")[0] or "." for run in data})
    return listed


def wait_for_runs(url: str, expected: Mapping[str, Iterable[str]], timeout: float = 60.0,
                  poll: float = 0.5) -> dict[str, list[str]]:
    """Polls `listed_runs` until each plugin lists the expected runs.

    Plugins scan the logdir and parse traces in the background (torch-tb-profiler
    rescans every 10 s), so a run written just now appears only after a while.
    """
    deadline = time.monotonic() + timeout
    while True:
        listed = listed_runs(url)
        missing = {plugin: sorted(set(runs) - set(listed.get(plugin, [])))
                   for plugin, runs in expected.items()}
        if not any(missing.values()):
            return listed
        if time.monotonic() >= deadline:
            raise TensorBoardError(f"after {timeout:.0f} s still not listed: {missing}; "
                                   f"listed: {listed}")
        time.sleep(poll)


def _get_json(url: str, route: str, timeout: float = 10.0):
    with _OPENER.open(url.rstrip("/") + route, timeout=timeout) as response:
        body = response.read()
        # The profile plugin gzips its answers whatever the request accepts.
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


def _raise_if_exited(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        raise TensorBoardError(f"TensorBoard exited with code {process.returncode}")


def memory_limit_bytes() -> int:
    """The address-space limit of each TensorBoard process, from MEMORY_ENV (GiB) or the default."""
    raw = os.environ.get(MEMORY_ENV, "")
    try:
        gib = float(raw) if raw else DEFAULT_MEMORY_GIB
    except ValueError:
        raise GapscopeInputError(f"{MEMORY_ENV}={raw!r}: not a number of GiB") from None
    if not 1 <= gib <= 1 << 20:
        raise GapscopeInputError(f"{MEMORY_ENV}={raw!r}: give 1 to {1 << 20} GiB")
    return int(gib * (1 << 30))


def _limit_memory(limit: int) -> None:
    """In the child before exec: inherited by every worker process the plugins start."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
