"""A TF worker's place in its cluster: the TF_CONFIG a launcher gives it, the rank it reads back."""
from __future__ import annotations

import json
import os
import socket
from contextlib import ExitStack

from gapscope.profilers import strict_json
from gapscope.profilers.errors import GapscopeInputError

TF_CONFIG = "TF_CONFIG"


def free_ports(n: int, host: str = "localhost") -> list[int]:
    """`n` distinct TCP ports free on `host` right now (all held open at once, so no two are the
    same). Another process may still take one before the worker binds it: the worker then fails
    with `port_in_use_message`."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def tf_config(world_size: int, rank: int, ports: list[int], host: str = "localhost") -> dict:
    """The TF_CONFIG of worker `rank` in a cluster of `world_size` workers on `host`'s `ports`."""
    if not 0 <= rank < world_size or len(ports) != world_size:
        raise ValueError(f"rank {rank} of {world_size} workers with {len(ports)} ports")
    return {"cluster": {"worker": [f"{host}:{port}" for port in ports]},
            "task": {"type": "worker", "index": rank}}


def tf_config_env(world_size: int, rank: int, ports: list[int], host: str = "localhost") -> dict[str, str]:
    """The environment a launcher gives worker `rank`: TF_CONFIG plus the torchrun-style
    RANK / WORLD_SIZE / LOCAL_RANK that the rest of gapscope reads."""
    return {TF_CONFIG: strict_json.dumps(tf_config(world_size, rank, ports, host)),
            "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank)}


def worker_envs(world_size: int, host: str = "localhost") -> list[dict[str, str]]:
    """The environments of `world_size` local workers, on ports free now: what a launcher adds
    to each worker's environment (rank r gets item r). A worker that still finds its port taken
    fails with exit 2 and `port_in_use_message`; the launcher may then try fresh ports."""
    ports = free_ports(world_size, host)
    return [tf_config_env(world_size, rank, ports, host) for rank in range(world_size)]


def cluster_place(environ=None) -> tuple[int, int] | None:
    """(rank, world size) from TF_CONFIG, None where there is none or it names one task only.
    Ranks count every task of the cluster (chief first, then workers), as MWMS numbers them."""
    environ = os.environ if environ is None else environ
    raw = environ.get(TF_CONFIG)
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster, task = config.get("cluster") or {}, config.get("task") or {}
        chiefs, workers = list(cluster.get("chief") or []), list(cluster.get("worker") or [])
        kind, index = task.get("type"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError) as exc:
        raise GapscopeInputError(f"TF_CONFIG is not a tf.distribute cluster: {exc}") from None
    if kind not in ("chief", "worker"):
        raise GapscopeInputError(f"TF_CONFIG task type {kind!r}: only chief and worker tasks train")
    world = len(chiefs) + len(workers)
    rank = index if kind == "chief" else len(chiefs) + index
    if not (0 <= index < len(chiefs if kind == "chief" else workers)):
        raise GapscopeInputError(f"TF_CONFIG task {kind} {index} is not in its cluster of {world}")
    return (rank, world) if world > 1 else None


def port_in_use_message() -> str:
    place = os.environ.get(TF_CONFIG, "")
    try:
        config = json.loads(place)
        kind, index = config["task"]["type"], int(config["task"]["index"])
        address = config["cluster"][kind][index]
    except (ValueError, KeyError, TypeError, IndexError):
        address = "its TF_CONFIG address"
    return f"the worker's port {address} is in use: run again (the launcher picks free ports)"
