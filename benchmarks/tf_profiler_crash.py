"""How often TensorFlow's profiler crashes a MultiWorkerMirroredStrategy worker, by the way the trace is
collected: the evidence behind workloads.runners.tf_distribute.traces_rank, to run again on a new TensorFlow.

Usage: python -m benchmarks.tf_profiler_crash [--runs 10] [--mode chief|after-fit|inside-fit|server]

Each run is two local workers (TF_CONFIG on free ports) fitting a small Keras MLP for 60 steps
with gapscope's marked train_step. Modes:
  chief       rank 0 alone: profiler started at step 5, stopped at step 10 inside fit (gapscope's way)
  inside-fit  every rank does what the chief does
  after-fit   every rank starts at step 5 and stops after fit has returned
  server      every rank runs TensorFlow's profiler server; rank 0 captures both from a thread
              (tf.profiler.experimental.client.trace, 1.5 s from step 5), as TensorBoard does
A line per run (exit codes; a negative one is the signal that killed the worker), then the count."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("chief", "inside-fit", "after-fit", "server")
ROOT = Path(__file__).resolve().parent.parent


def worker(mode: str, logdir: str, profiler_ports: list[int], steps: int = 60) -> None:
    """One rank: MWMS fit with the profiler collected as `mode` says."""
    import threading

    import numpy as np
    import tensorflow as tf
    import keras
    from tensorflow.python.profiler.internal import _pywrap_traceme

    from gapscope.profilers.keras_marks import mark_keras_phases
    from gapscope.workloads.runners.tf_distribute import build_from_local_batch

    rank = int(os.environ["RANK"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if mode == "server":
        tf.profiler.experimental.server.start(profiler_ports[rank])
    rng = np.random.default_rng(rank)
    x, y = rng.random((4096, 64), np.float32), rng.integers(0, 10, 4096)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dense(10)])
        mark_keras_phases(model)
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    build_from_local_batch(model)
    captured = threading.Event()
    traces = mode in ("inside-fit", "after-fit") or (mode == "chief" and rank == 0)

    def capture() -> None:
        addresses = ",".join(f"grpc://localhost:{port}" for port in profiler_ports)
        tf.profiler.experimental.client.trace(addresses, logdir, 1500)
        captured.set()

    class Collect(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 5 and traces:
                tf.profiler.experimental.start(logdir)
            if batch == 5 and mode == "server" and rank == 0:
                threading.Thread(target=capture, daemon=True).start()

        def on_train_batch_end(self, batch, logs=None):
            if batch == 10 and traces and mode != "after-fit":
                tf.profiler.experimental.stop()

    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Collect()])
    if mode == "after-fit":
        tf.profiler.experimental.stop()
    if mode == "server":  # serve until the capture has been collected here, and on rank 0 written
        while _pywrap_traceme.traceme_enabled():
            time.sleep(0.01)
        if rank == 0:
            captured.wait(60)
        time.sleep(1.0)


def run_once(mode: str) -> list[int]:
    from gapscope.workloads.runners.tf_cluster import free_ports, tf_config_env
    ports = free_ports(4)
    with tempfile.TemporaryDirectory(prefix="gapscope-tf-crash-") as logdir:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "benchmarks.tf_profiler_crash", "--worker", mode, logdir,
             json.dumps(ports[2:])], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                 "KERAS_BACKEND": "tensorflow", **tf_config_env(2, rank, ports[:2])})
            for rank in range(2)]
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=300))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        return codes


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        worker(argv[1], argv[2], json.loads(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mode", choices=MODES, default="chief")
    args = parser.parse_args(argv)
    crashed = []
    for run in range(args.runs):
        started, load = time.monotonic(), os.getloadavg()[0]
        codes = run_once(args.mode)
        dead = [rank for rank, code in enumerate(codes) if code < 0]
        crashed += [run] if dead else []
        print(f"run {run + 1}: exit codes {codes} ({time.monotonic() - started:.1f} s, load {load:.1f})"
              + (f": rank {', '.join(map(str, dead))} killed by a signal" if dead else ""), flush=True)
    print(f"{args.mode}: {len(crashed)} of {args.runs} runs lost a worker to a signal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
