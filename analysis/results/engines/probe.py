"""What a cluster's workers run gapscope with, checked before any rank is sent: Python, the
libraries the rank analysis imports, and gapscope's own code (a digest of its sources), each
against this process's, so a skew is one line and not a traceback from inside a worker."""
from __future__ import annotations

import socket
from pathlib import Path

from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.environment import GAPSCOPE_PACKAGE

# The packages a rank's analysis imports: what is shipped to workers that lack gapscope.
PACKAGES = ("analysis", "profilers")


def shipped_sources() -> list[tuple[Path, str]]:
    """gapscope's package file and the sources of PACKAGES, each with its name in the package
    (gapscope/analysis/...): what a worker without gapscope is given."""
    found = [(GAPSCOPE_PACKAGE / "__init__.py", "gapscope/__init__.py")]
    for package in PACKAGES:
        found += [(source, "gapscope/" + source.relative_to(GAPSCOPE_PACKAGE).as_posix())
                  for source in sorted((GAPSCOPE_PACKAGE / package).rglob("*.py"))]
    return found


def make_probe():
    """A probe function pickled by value (defined in a call, not importable by name), so it runs
    on a worker that cannot import gapscope at all."""
    def probe() -> dict:
        import hashlib
        import importlib
        import importlib.util
        import sys
        found = {"python": "%d.%d" % sys.version_info[:2]}
        for name in ("numpy", "msgspec"):
            try:
                found[name] = importlib.import_module(name).__version__
            except ImportError:
                found[name] = None
        import zipfile
        # Each package read where it lies: Ray ships every py_modules entry to a folder of its
        # own, Dask's upload_file both in one zip; a package not found: no gapscope there.
        sources = {}
        spec = importlib.util.find_spec("gapscope")
        folder = Path(list(spec.submodule_search_locations)[0]) if spec else None
        for package in ("analysis", "profilers"):
            if folder is None:
                sources = None
                break
            if zipfile.is_zipfile(folder.parent):  # the code as uploaded (Dask's upload_file)
                with zipfile.ZipFile(folder.parent) as archive:
                    sources.update({n.partition("/")[2]: archive.read(n)
                                    for n in archive.namelist() if n.endswith(".py")
                                    and n.split("/")[:2] == ["gapscope", package]})
            elif (folder / package).is_dir():
                sources.update({p.relative_to(folder).as_posix(): p.read_bytes()
                                for p in (folder / package).rglob("*.py")})
            else:
                sources = None
                break
        digest = None
        if sources:
            sha = hashlib.sha256()
            for name in sorted(sources):
                sha.update(name.encode() + b"\0" + sources[name])
            digest = sha.hexdigest()[:16]
        found["gapscope"] = digest
        return found
    return probe


def check_workers(address: str, mine: dict, theirs: list[dict]) -> None:
    """One line naming the first difference between this process and a worker; None passes."""
    if not theirs:
        raise GapscopeInputError(f"--engine {address}: the cluster has no workers")
    for worker in theirs:
        for name in ("numpy", "msgspec", "gapscope"):
            if worker.get(name) is None:
                raise GapscopeInputError(f"--engine {address}: the workers lack {name} "
                                         f"(install gapscope's dependencies there)")
        for name, want in mine.items():
            if worker.get(name) != want:
                what = "gapscope's code" if name == "gapscope" else name
                raise GapscopeInputError(f"--engine {address}: version skew: the workers run "
                                         f"{what} {worker.get(name)}, this process {want}")


def reachable(address: str, timeout_s: float, handshake: str | None = None) -> None:
    """A refused or unroutable address said at once, in one line, before a client library spends
    its whole connect timeout retrying it. `handshake`: the server speaks first (a Dask
    scheduler sends its handshake on accepting), so a server that accepts and stays silent is
    refused after `timeout_s` too; a client library waited on it for ever."""
    host, _, port = address.partition("://")[2].rpartition(":")
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise GapscopeInputError(f"--engine {address}: nothing answers at {host}:{port} "
                                 f"({reason})") from None
    with connection:
        if handshake is None:
            return
        try:
            said = connection.recv(1)  # the socket keeps create_connection's timeout
        except OSError:  # socket.timeout is an OSError
            said = None
    if not said:
        raise GapscopeInputError(f"--engine {address}: {host}:{port} accepts connections but sent no "
                                 f"{handshake} handshake within {timeout_s:g} s (not a {handshake} "
                                 "scheduler, or a stuck one)")
