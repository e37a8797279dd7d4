"""The Ray engine: a local Ray started here (`--engine ray`), the cluster of a `ray job submit`
(`--engine ray` with RAY_ADDRESS set), or Ray Client (`--engine ray://HOST:PORT`), gapscope's
code shipped with runtime_env. Imported only when --engine names Ray: Ray is an optional extra."""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Callable

from gapscope.analysis.results.engines.interface import Engine, one_line
from gapscope.analysis.results.engines.local import worker_count
from gapscope.analysis.results.engines.probe import check_workers, make_probe, reachable
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.environment import GAPSCOPE_PACKAGE

CONNECT_TIMEOUT_S = 10
# One token for every Ray this process starts: Ray's C++ side caches the first it reads.
_TOKEN = secrets.token_hex(32)
# A worker process that died is run again by Ray itself, this many times, before the rank fails.
SYSTEM_RETRIES = 2
# Joins of a Ray Client whose server died as it started (see _join).
CLIENT_START_TRIES = 3


class RayEngine(Engine):
    name = "ray"
    # Ranks go in batches of 8 MB of files, as on Dask (engines.batches): at 256 ranks of 1 MB on
    # 2 CPUs a worker waited 0.95 s in all between tasks a rank each, 0.36 s in batches (the
    # local pool's 0.3 s), and the wall fell by a quarter (a 2-core VM, load 2-3).
    batch_bytes = 8_000_000

    def __init__(self, ray, started: bool, temp_dir: str | None, env: dict) -> None:
        self._ray, self._started, self._temp_dir, self._env = ray, started, temp_dir, env
        self.workers = int(ray.cluster_resources().get("CPU", 0))
        self._refs: dict = {}
        self._remote = {}

    @classmethod
    def open(cls, address: str | None) -> RayEngine:
        if address is None and os.environ.get("RAY_ADDRESS", "").startswith("ray://"):
            address = os.environ["RAY_ADDRESS"]  # Ray Client by environment: checked the same
        embedded = address is None and not os.environ.get("RAY_ADDRESS")
        # Ray reads its authentication mode when imported: set before.
        saved = _token_env() if embedded else _join_token_env()
        try:
            import ray
        except ImportError:
            _restore(saved)
            raise GapscopeInputError("--engine ray needs Ray: pip install 'gapscope[ray]'") from None
        quiet = {"include_dashboard": False, "log_to_driver": False,
                 "logging_level": logging.ERROR}
        if ray.is_initialized():  # inside a Ray task or a script that started Ray: use it
            _restore(saved)
            return cls(ray, False, None, {})
        if embedded:
            return cls._start_local(ray, quiet, saved)
        try:
            _reread_auth_mode()
            if address is not None:
                reachable(address, CONNECT_TIMEOUT_S)
                _client_answers(address)
            shipped = {"py_modules": [str(GAPSCOPE_PACKAGE)]}
            _join(ray, address, dict(quiet, runtime_env=shipped))
        except BaseException:
            _restore(saved)
            raise
        engine = cls(ray, True, None, saved)
        try:
            probe = ray.remote(num_cpus=0)(make_probe())
            check_workers(address or "ray", make_probe()(), [ray.get(probe.remote())])
        except BaseException:
            engine.close()
            raise
        return engine

    @classmethod
    def _start_local(cls, ray, quiet: dict, saved: dict) -> RayEngine:
        """address="local": a fresh Ray of its own, never one a stale address file names. Its
        files in a temp folder of its own (short: Ray's socket paths have a length limit)."""
        _reread_auth_mode()
        temp_dir = tempfile.mkdtemp(prefix="gs-ray-", dir="/tmp")
        try:
            with _ctrl_c_after():
                ray.init(address="local", num_cpus=worker_count(os.cpu_count() or 1),
                         _temp_dir=temp_dir, **quiet)
            return cls(ray, True, temp_dir, saved)
        except BaseException:
            ray.shutdown()
            _restore(saved)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise

    def submit(self, key: int, fn: Callable, args: tuple, where: str | None = None) -> None:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(num_cpus=1, max_retries=SYSTEM_RETRIES)(fn)
        self._refs[remote.remote(*args)] = key

    @property
    def pending(self) -> int:
        return len(self._refs)

    def next_done(self):
        (ref,), _ = self._ray.wait(list(self._refs), num_returns=1)
        key = self._refs.pop(ref)
        try:
            return key, self._ray.get(ref), None
        except self._ray.exceptions.RayTaskError as error:
            return key, None, getattr(error, "cause", None) or error
        except self._ray.exceptions.RayError as error:  # the worker died past its retries
            return key, None, error

    def cancel(self) -> None:
        # A Ray started here is shut down next, its workers with it. A joined cluster's tasks are
        # interrupted, not killed: Ray 2.60's force cancel, racing a running task's reply,
        # aborted this process (task_manager.cc "Tried to complete task that was not pending",
        # 1 Ctrl-C in 6 here).
        if not self._started:
            for ref in list(self._refs):
                try:
                    self._ray.cancel(ref)
                except Exception:  # noqa: BLE001 - already finished or gone: nothing to stop
                    pass
        self._refs.clear()

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            _restore(self._env)
        for _ in range(5):  # Ray's processes, stopping, may still write a log or two
            if not self._temp_dir or not os.path.exists(self._temp_dir):
                break
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            time.sleep(0.2)


def _join(ray, address: str | None, options: dict) -> None:
    """ray.init on a running cluster. The Ray Client server forks a server per client, which
    dies now and then in the fork (gRPC's poller; ray-project/ray#63202, about 1 join in 7
    here): "Initialization failure from server", tried again with a fresh one."""
    for attempt in range(1, CLIENT_START_TRIES + 1):
        try:
            with warnings.catch_warnings():  # its "connection timed out" advice: one line here
                warnings.simplefilter("ignore")
                ray.init(address=address or "auto", **options)
            return
        except ConnectionAbortedError as error:
            ray.shutdown()
            if attempt == CLIENT_START_TRIES:
                raise GapscopeInputError(f"--engine {address or 'ray'}: cannot join the Ray "
                                         f"cluster ({one_line(error)})") from None
        except (ConnectionError, RuntimeError, TimeoutError) as error:
            raise GapscopeInputError(f"--engine {address or 'ray'}: cannot join the Ray "
                                     f"cluster ({one_line(error)})") from None


@contextlib.contextmanager
def _ctrl_c_after():
    """Ctrl-C held until the block ends: a Ray interrupted halfway through its start leaves its
    agents running with no raylet to stop them (seen); once started, shutdown stops them all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def _token_env() -> dict:
    """Ray 2.60 turns token authentication on for a new cluster, writing ~/.ray/auth_token and
    warning: the token is made here and passed by environment (to Ray's own processes too),
    unless the user set the mode or token. Returns what it replaced, to restore."""
    env = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE") or "token",
           "RAY_USAGE_STATS_ENABLED": "0"}
    if env["RAY_AUTH_MODE"] == "token" and not os.environ.get("RAY_AUTH_TOKEN"):
        env["RAY_AUTH_TOKEN"] = _TOKEN
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return saved


def _join_token_env() -> dict:
    """Joining a cluster: Ray's client sends a token only in token mode, which it does not turn on
    by itself where the user gave a token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token,
    as `ray start` does for a local cluster): turned on here then. Returns what it replaced."""
    if os.environ.get("RAY_AUTH_MODE") or not (
            os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
            or os.path.isfile(os.path.expanduser("~/.ray/auth_token"))):
        return {}
    saved = {"RAY_AUTH_MODE": None}
    os.environ["RAY_AUTH_MODE"] = "token"
    return saved


def _reread_auth_mode() -> None:
    """Ray imported before (by the user's code) read the mode then: re-read, as Ray does."""
    try:
        from ray._raylet import Config
        Config.initialize("")
    except (ImportError, AttributeError):
        pass


def _client_answers(address: str) -> None:
    """One ping to the Ray Client server before ray.init, which retries a refused token for 30 s
    and then says only "connection timeout": a missing or wrong token said at once, in one line."""
    try:
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc
    except ImportError as error:
        raise GapscopeInputError(f"--engine {address}: Ray Client needs grpcio ({error}): "
                                 "pip install 'ray[client]'") from None
    channel = init_grpc_channel(address.partition("://")[2], asynchronous=False)
    try:
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(
            ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING),
            timeout=CONNECT_TIMEOUT_S)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise GapscopeInputError(
                f"--engine {address}: the cluster refuses this client's token ({error.details()}): "
                "set RAY_AUTH_TOKEN to the head's (`ray get-auth-token` there)") from None
        raise GapscopeInputError(f"--engine {address}: no Ray Client server answers "
                                 f"({error.code().name}: {error.details()})") from None
    finally:
        channel.close()


def _restore(saved: dict) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
