"""Keras' last-chance save (torch backend): oom_keras.py oom|resume WORKDIR (see oom_common.py).

``oom``: a layer raises a real ``torch.OutOfMemoryError`` in batch ``FAIL_IN_EPOCH`` of epoch
``EPOCH`` (BackupAndRestore has saved at the end of each epoch before), inside
``training_watchdog.keras.last_chance(watchdog)``, which saves through the BackupAndRestore.
``failed.json``: the optimizer's iterations and the weights at the failure.
``resume``: the same fit() with the same BackupAndRestore, recording the first epoch and the
weights it starts with.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import oom_common as oc  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

import training_watchdog.keras as twk  # noqa: E402
from common import digest  # noqa: E402

mode, workdir = sys.argv[1], sys.argv[2]
backup_dir = os.path.join(workdir, "backup")
EPOCH, FAIL_IN_EPOCH, BATCHES = 2, 3, 8


class Failing(keras.layers.Layer):
    """Passes its input through; raises the OOM at the chosen batch of training."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.at = None  # (epoch, batch, digest, iterations) of the batch about to run

    def call(self, x, training=False):
        if training and mode == "oom" and self.at is not None and self.at[:2] == (EPOCH, FAIL_IN_EPOCH):
            oc.fail(workdir, self.at[3], self.at[2])  # step: the optimizer's iterations
        return x


class Probe(keras.callbacks.Callback):
    def __init__(self, failing):
        super().__init__()
        self.failing, self.epoch, self.first = failing, None, True

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        if mode == "resume" and self.first:
            self.first = False
            oc.resumed(workdir, epoch, digest(self.model.get_weights()))

    def on_train_batch_begin(self, batch, logs=None):
        self.failing.at = (self.epoch, batch, digest(self.model.get_weights()),
                           int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))


keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x, y = rng.standard_normal((8 * BATCHES, 16)).astype("float32"), rng.standard_normal((8 * BATCHES, 1)).astype("float32")
failing = Failing()
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), failing, keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
backup = keras.callbacks.BackupAndRestore(backup_dir)
watchdog = twk.WatchdogCallback(backup=backup)
with oc.reported(workdir):
    with twk.last_chance(watchdog):
        model.fit(x, y, batch_size=8, epochs=EPOCH + 1, verbose=0, callbacks=[backup, watchdog, Probe(failing)])
