"""A CPU's measured fp32 GEMM peak, per machine, framework and thread setting: the fastest square
GEMM ever timed there, kept in the cache folder, so that a layer's GFLOP/s reads as a share."""
from __future__ import annotations

import os
import time
from pathlib import Path

from gapscope.profilers import state_json, strict_json
from gapscope.profilers.environment import cpu_name, host, omp_num_threads
from gapscope.profilers.run_dir import write_atomic

SIZE = 1024          # 2·1024³ = 2.1 GFLOP a GEMM: well above cache sizes, under a second here
REPEATS = 3          # timed after an untimed one; the fastest counts
CACHE_FILE = "gemm_peak.json"


def _cache_dir() -> Path:
    # The same folder as the data cache (workloads.data), read here without importing it.
    return Path(os.environ.get("GAPSCOPE_CACHE") or Path.home() / ".cache" / "gapscope")


def _gemm(framework: str):
    """A no-argument call that runs one SIZE x SIZE fp32 GEMM to completion in `framework`."""
    if framework in ("torch", "keras-torch"):
        import torch
        a, b = torch.rand(SIZE, SIZE), torch.rand(SIZE, SIZE)
        return lambda: torch.mm(a, b), "torch.mm"
    if framework == "keras-jax":
        import jax
        a, b = jax.random.uniform(jax.random.key(0), (2, SIZE, SIZE))
        matmul = jax.jit(jax.numpy.matmul)
        return lambda: matmul(a, b).block_until_ready(), "jax.numpy.matmul"
    import tensorflow as tf
    a, b = tf.random.uniform((SIZE, SIZE)), tf.random.uniform((SIZE, SIZE))
    return lambda: tf.linalg.matmul(a, b).numpy(), "tf.linalg.matmul"


def measured_peak(framework: str) -> dict:
    """Times the GEMM now and keeps the fastest ever seen under this key: load on a shared
    machine only slows a GEMM, so the maximum over runs is the best estimate of the peak."""
    run, op = _gemm(framework)
    run()
    best = min(_timed(run) for _ in range(REPEATS))
    gflops = 2 * SIZE ** 3 / best / 1e9
    key = f"{host()}|{cpu_name()}|{op}|OMP_NUM_THREADS={omp_num_threads()}"
    path = _cache_dir() / CACHE_FILE
    try:
        cached = state_json.load(path)   # the loader every gapscope file goes through
    except (OSError, ValueError):        # absent or corrupt (StateFileError is a ValueError)
        cached = {}
    cached = cached if isinstance(cached, dict) else {}
    kept = cached.get(key) if isinstance(cached.get(key), (int, float)) else None
    peak = max(gflops, kept or 0.0)
    if kept is None or gflops > kept:
        cached[key] = round(peak, 3)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, strict_json.dumps(cached, indent=1))
        except OSError:
            pass  # a read-only cache: this run's figure still counts
    return {"gflops": round(peak, 3), "now_gflops": round(gflops, 3),
            "method": f"the fastest fp32 {SIZE}x{SIZE} {op} timed on this machine, "
                      f"OMP_NUM_THREADS {omp_num_threads()}", "cache": str(path)}


def theoretical_peak(cpuinfo: str, cpus: int) -> dict | None:
    """The CPU's theoretical fp32 peak from what the machine reports (/proc/cpuinfo): CPUs ×
    fp32 lanes of its widest vector unit (AVX-512 16, AVX2 8, else SSE 4) × 2 where it has FMA
    × its clock. One vector unit a core is assumed (many cores have two: their peak is twice
    this); a logical CPU counts as a core. None where the file gives no clock or no flags."""
    flags, clocks = set(), []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags":
            flags |= set(value.split())
        elif key == "cpu MHz":
            try:
                clocks.append(float(value))
            except ValueError:
                continue
    if not flags or not clocks or cpus < 1:
        return None
    lanes, unit = (16, "AVX-512") if "avx512f" in flags else (8, "AVX2") if "avx2" in flags else (4, "SSE")
    fma = 2 if "fma" in flags else 1
    mhz = max(clocks)
    return {"gflops": round(cpus * lanes * fma * mhz / 1000.0, 1),
            "method": f"theoretical: {cpus} CPUs × {lanes} fp32 lanes ({unit}) × {fma} "
                      f"({'FMA' if fma == 2 else 'no FMA'}) × {mhz:.0f} MHz, one vector unit a "
                      "core, from /proc/cpuinfo"}


def machine_theoretical_peak() -> dict | None:
    """theoretical_peak of this machine; None where /proc/cpuinfo cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return theoretical_peak(text, len(os.sched_getaffinity(0)))


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
