"""The Dask engine: a LocalCluster started here (`--engine dask`), or a running scheduler joined
(`--engine tcp://HOST:PORT`, `dask://HOST:PORT`), gapscope's code uploaded to workers that
lack it. Imported only when --engine names Dask: Dask is an optional extra."""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from gapscope.analysis.results.engines.interface import Engine, EngineLost, one_line
from gapscope.analysis.results.engines.local import worker_count
from gapscope.analysis.results.engines.probe import check_workers, make_probe, reachable, shipped_sources
from gapscope.profilers.errors import GapscopeInputError

CONNECT_TIMEOUT_S = 10
POLL_S = 0.02         # how often next_done looks for a finished task
WORKER_CHECK_S = 5.0  # how long tasks run without news before the workers are counted


# The worker environment Dask sets before it spawns a worker (None: left unset).
TRIM_ENVIRON = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
# What the embedded cluster's processes do beside the ranks, made rarer: the worker's stack
# sampler (every 10 ms it takes the GIL from the rank's thread), the event loops' tick (20 ms),
# the memory monitor (100 ms) and the system monitor (500 ms). At 64 ranks of 20 MB on 2
# workers (a quiet 2-core VM) this took the wall from 19.6-19.8 s to 18.9 s and the machine's
# CPU from 34.2-34.8 s to 32.9 s (the local pool: 17.7 s, 30.9 s). A joined cluster keeps its own.
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1000ms",
         "distributed.worker.memory.monitor-interval": "1s",
         "distributed.admin.system-monitor.interval": "2s"}


class DaskEngine(Engine):
    name = "dask"
    # A task costs some ms of CPU beyond the rank's own work: 4 ms in this process (the
    # scheduler's round trip, the client's gather) and 2-3 ms in the worker (its bookkeeping),
    # measured at 256 ranks of 1 MB on 2 workers (a 2-core VM, load 1.1-1.5), against a 1 MB
    # rank's 23 ms: ranks go in batches of 8 MB of files (this process's CPU fell from 1.1 s to
    # 0.2 s, the wall's excess over the local pool from +38 % to +4-11 %).
    batch_bytes = 8_000_000

    def __init__(self, client, cluster=None, address: str | None = None) -> None:
        from distributed import as_completed
        self.client, self.cluster, self.address = client, cluster, address
        self.workers = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        self._keys: dict = {}
        # Results (or errors) fetched by Dask's own loop as tasks end: this thread waits on a
        # queue only, never inside Dask's `sync`, where a Ctrl-C trips Dask (distributed's sync
        # logged "NameError: cannot access free variable 'future'", 1 Ctrl-C in 5 here).
        self._done = as_completed(with_results=True, raise_errors=False)
        self._no_worker_said = False

    @classmethod
    def open(cls, address: str | None) -> DaskEngine:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise GapscopeInputError("--engine dask needs Dask: pip install 'gapscope[dask]'") from None
        if address is None:
            import dask
            # Dask starts its workers with MALLOC_TRIM_THRESHOLD_=65536, so glibc hands freed
            # memory back to the kernel and faults it in again: a rank's analysis took twice
            # its time and CPU (0.75 s against 0.32 s for one 20 MB rank). Unset here.
            with dask.config.set({TRIM_ENVIRON: None, **QUIET}):
                # One thread a worker: the rank analysis is Python, bound by the GIL.
                cluster = LocalCluster(n_workers=worker_count(os.cpu_count() or 1), threads_per_worker=1,
                                       processes=True, dashboard_address=None,
                                       # its HTTP server (health routes) on a free port, not 8787:
                                       # no "port in use" warning beside another cluster
                                       scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"},
                                       silence_logs=logging.ERROR)
            return cls(Client(cluster), cluster)
        reachable(address, CONNECT_TIMEOUT_S, handshake="Dask")  # a scheduler speaks first
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as error:
            raise GapscopeInputError(f"--engine {address}: no Dask scheduler answers "
                                     f"({one_line(error)})") from None
        engine = cls(client, address=address)
        try:
            engine._ready_workers(address)
        except BaseException:
            client.close()
            raise
        return engine

    def _ready_workers(self, address: str) -> None:
        """Workers without gapscope get its code as a zip (upload_file); then every worker must
        run what this process runs."""
        probe = make_probe()
        mine = probe()
        theirs = list(self.client.run(probe).values())
        if any(w.get("gapscope") is None for w in theirs):
            with tempfile.TemporaryDirectory() as folder:
                self.client.upload_file(str(_zip_packages(Path(folder) / "gapscope_code.zip")))
            theirs = list(self.client.run(probe).values())
        check_workers(address, mine, theirs)

    def submit(self, key: int, fn: Callable, args: tuple, where: str | None = None) -> None:
        future = self.client.submit(fn, *args, pure=False)
        self._keys[future.key] = key
        self._done.add(future)

    def _say_if_no_worker(self) -> None:
        try:
            workers = len(self.client.scheduler_info()["workers"])
        except Exception:  # noqa: BLE001 - a scheduler going away is told by its futures
            return
        if workers == 0 and not self._no_worker_said:
            sys.stderr.write(f"gapscope: note: --engine {self.address or 'dask'}: the Dask cluster has no "
                             "worker now; its ranks wait for one (Ctrl-C stops)\n")
        self._no_worker_said = workers == 0

    @property
    def pending(self) -> int:
        return len(self._keys)

    def next_done(self):
        # Polled rather than blocked on, so that a cluster left with no worker (its only one
        # died) is said while the ranks wait, instead of a silent wait.
        quiet_s = 0.0
        while not self._done.has_ready() and not self._done.is_empty():
            time.sleep(POLL_S)
            quiet_s += POLL_S
            if quiet_s >= WORKER_CHECK_S:
                quiet_s = 0.0
                self._say_if_no_worker()
        future, value = next(self._done)
        key = self._keys.pop(future.key)
        if future.status == "error":  # the value is then the error's (type, error, traceback)
            return key, None, value[1]
        if future.status == "cancelled":
            # Only cancel() cancels this engine's tasks, and it forgets them first: a cancelled
            # one means the scheduler went away (its value a FutureCancelledError), and with it
            # every task left.
            self._keys.clear()
            self._done.clear()
            _quiet_dask_logs()  # its client's reconnect loop logs a traceback as it gives up
            why = one_line(value) if isinstance(value, BaseException) else "its tasks cancelled"
            raise EngineLost(f"--engine {self.address or 'dask'}: the Dask scheduler went away ({why})")
        return key, value, None

    def cancel(self) -> None:
        # What Dask logs as its tasks are dropped and its connections close under them
        # ("Couldn't gather keys … forgotten", a closed stream's traceback) is the stop itself,
        # not news: the command says it was interrupted, in one line.
        _quiet_dask_logs()
        futures = list(self._done.futures)
        self._done.clear()
        self._keys.clear()
        if futures:
            self.client.cancel(futures, force=True)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _quiet_dask_logs() -> None:
    # Dask's config gives some of them levels of their own (tornado.application: error).
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "tornado"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _zip_packages(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for source, name in shipped_sources():
            archive.write(source, name)
    return path
