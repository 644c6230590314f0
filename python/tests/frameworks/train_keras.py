"""Keras (torch backend): train_keras.py leak|resume WORKDIR (see common.py).

Saves through BackupAndRestore, which records the epoch being trained: "step" here is
that epoch, and the resumed fit() starts it again with the saved weights.
"""

import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import common  # noqa: E402,F401  (puts training_watchdog on sys.path)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from training_watchdog.keras import WatchdogCallback  # noqa: E402

mode, workdir = sys.argv[1], sys.argv[2]
backup_dir = os.path.join(workdir, "backup")


class Probe(keras.callbacks.Callback):
    """After WatchdogCallback: leaks, notices the save, records the state."""

    def __init__(self, watchdog):
        super().__init__()
        # Dies at the step it saved: BackupAndRestore saves again at every epoch end, and an
        # epoch that ended in the steps between the watchdog's save and the simulated death
        # made the run resume one epoch later than recorded (seen in CI: "6 != 5").
        self.watchdog, self.leak, self.step, self.first_epoch = watchdog, common.Leak(0), 0, None

    def on_epoch_begin(self, epoch, logs=None):
        if mode == "resume" and self.first_epoch is None:
            self.first_epoch = epoch
            common.write_json(os.path.join(workdir, "resumed.json"), {
                "step": epoch, "digest": common.digest(self.model.get_weights())})

    def on_train_batch_end(self, batch, logs=None):
        if mode != "leak":
            return
        self.step += 1
        if self.leak.saved_at is None and self.watchdog.saves:
            self.leak.saved_at = self.step
            self.leak.saved(workdir, {"step": self.watchdog.last_saved[0], "batch": self.watchdog.last_saved[1],
                                      "digest": common.digest(self.model.get_weights())})
        self.leak.step(self.step)
        self.leak.maybe_die()
        time.sleep(0.02)


keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x, y = rng.standard_normal((64, 16)).astype("float32"), rng.standard_normal((64, 1)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
epochs = 100000
if mode == "resume":
    with open(os.path.join(backup_dir, "training_metadata.json")) as f:
        epochs = json.load(f)["epoch"] + 1  # finish the interrupted epoch
backup = keras.callbacks.BackupAndRestore(backup_dir)
watchdog = WatchdogCallback(backup=backup)
model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[backup, watchdog, Probe(watchdog)])
