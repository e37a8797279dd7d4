"""Which engine analyses a job's ranks: --engine (or GAPSCOPE_ENGINE) parsed up front, the
cluster engines imported and started only when named, once per command, closed at its end."""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from gapscope.analysis.results.engines.interface import Engine
from gapscope.analysis.results.engines.local import local_engine
from gapscope.profilers.errors import GapscopeInputError

ENGINE_ENV = "GAPSCOPE_ENGINE"
KINDS = ("local", "dask", "ray")
FORMS = "local, dask, ray, tcp://HOST:PORT or dask://HOST:PORT (Dask), ray://HOST:PORT (Ray Client)"


@dataclass(frozen=True)
class EngineSpec:
    kind: str                   # local, dask or ray
    address: str | None = None  # None: started here (dask, ray) or the pool (local)

    def __str__(self) -> str:
        return self.address or self.kind


def parse_engine(text: str | None) -> EngineSpec:
    """`local`, `dask`, `ray`, `tcp://…`/`dask://…` (a Dask scheduler), `ray://…` (Ray Client)."""
    text = (text or "local").strip()
    if text in KINDS:
        return EngineSpec(text)
    scheme, sep, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    # ASCII only: str.isdigit() passes "٣" and a host may not hold spaces or slashes.
    if sep and _HOST.fullmatch(host) and port.isascii() and port.isdigit() and 0 < int(port) < 65536:
        if scheme in ("tcp", "dask"):
            return EngineSpec("dask", f"tcp://{rest}")
        if scheme == "ray":
            return EngineSpec("ray", text)
    # The text as Python shows it, cut after the escaping: one character can take ten (\U00012544).
    shown = repr(text)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    raise GapscopeInputError(f"--engine {shown}: not an engine; give {FORMS}")


_HOST = re.compile(r"[A-Za-z0-9_.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")  # a name, IPv4, or [IPv6]


class EngineChoice:
    """The engine of one command. The local pool is made per job, sized to its ranks; a cluster
    is started or joined at the first job and kept for the others."""

    def __init__(self, spec: EngineSpec, retries: int = 0, engine: Engine | None = None,
                 on_ranks=None) -> None:
        if retries < 0:
            raise GapscopeInputError(f"--rank-retries {retries}: give 0 or more")
        self.spec, self.retries = spec, retries
        # on_ranks(label, total, done, failed, running, megabytes, seconds): a progress bar's
        # callback as ranks complete (None: nobody watches).
        self.on_ranks = on_ranks
        self._cluster, self._owned = engine, engine is None

    @contextlib.contextmanager
    def engine(self, ranks: int, workers: int | None = None):
        if self._cluster is None and self.spec.kind == "local":
            with local_engine(ranks, workers) as engine:
                yield engine
            return
        if self._cluster is None:
            self._cluster = _open_cluster(self.spec)
        yield self._cluster

    def close(self) -> None:
        if self._cluster is not None and self._owned:
            self._cluster.close()
            self._cluster = None


def _open_cluster(spec: EngineSpec) -> Engine:
    if spec.kind == "dask":
        from gapscope.analysis.results.engines.dask_engine import DaskEngine
        return DaskEngine.open(spec.address)
    from gapscope.analysis.results.engines.ray_engine import RayEngine
    return RayEngine.open(spec.address)


_current: EngineChoice | None = None


def current_choice() -> EngineChoice:
    """The command's choice; outside breakdown, compare and report (the API, the TensorBoard
    plugin: a cluster started per request would cost seconds each), the local pool."""
    return _current or EngineChoice(EngineSpec("local"))


@contextlib.contextmanager
def using_engine(engine: str | Engine | None = None, retries: int = 0, on_ranks=None):
    """Job analyses inside use `engine` (a spec, GAPSCOPE_ENGINE's where None, or an engine
    already open, left open); a cluster this started is closed on the way out."""
    global _current
    if isinstance(engine, Engine):
        choice = EngineChoice(EngineSpec(engine.name), retries, engine, on_ranks=on_ranks)
    else:
        choice = EngineChoice(parse_engine(engine or os.environ.get(ENGINE_ENV)), retries,
                              on_ranks=on_ranks)
    previous, _current = _current, choice
    try:
        yield choice
    finally:
        _current = previous
        choice.close()
