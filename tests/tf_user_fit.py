"""A user's own tf.distribute script (run once per worker, with TF_CONFIG): Keras 3 fit under
MultiWorkerMirroredStrategy recorded by gapscope.capture_keras.

Usage: python tests/tf_user_fit.py OUT_DIR"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def main(out: str) -> None:
    import numpy as np
    import tensorflow as tf
    import keras

    import gapscope
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 20)).astype("float32")
    y = (x[:, :10].argmax(axis=1)).astype("int64")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with gapscope.capture_keras(model, "tfuser", trace_steps=(3, 6), out=out, warmup_steps=2) as cap:
        model.fit(data, epochs=1, steps_per_epoch=10, verbose=0, callbacks=[cap])
    print("run_dir", cap.run_dir)


if __name__ == "__main__":
    main(sys.argv[1])
