"""Test helper script: a Keras fit (TF backend) under capture_keras, timers only, in a process that
started TensorFlow's profiler server, until a stop file appears. Prints `ready` after its first
epoch. Usage: PORT OUT STOP_FILE"""
from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    import gapscope

    port, out, stop = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    tf.profiler.experimental.server.start(port)
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * 20, 100), dtype=np.float32), rng.integers(0, 10, 64 * 20)
    model = keras.Sequential([keras.Input((100,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class StopFile(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                print("ready", flush=True)
            if stop.exists():
                self.model.stop_training = True

    model.fit(x, y, batch_size=64, epochs=100_000, verbose=0,
              callbacks=[gapscope.capture_keras(model, "tf-served", trace_steps=None, out=out), StopFile()])
