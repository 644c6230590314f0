"""Keras callback: save at the next batch end when the watchdog asks, then acknowledge.

::

    import keras
    from training_watchdog.keras import WatchdogCallback

    backup = keras.callbacks.BackupAndRestore("backup")    # resumes a run that died
    model.fit(x, y, epochs=10, callbacks=[backup, WatchdogCallback(backup=backup)])

Run it under ``watchdog run -- python3 train.py`` (or after :func:`training_watchdog.attach`
in a notebook). On train begin the callback installs the signal handler (it only sets a
flag); at the end of every batch it checks :func:`training_watchdog.checkpoint_requested`
(one ``stat`` of the request file) and, when asked, saves and acknowledges.

How it saves: with ``backup=`` (a ``keras.callbacks.BackupAndRestore``), through that
callback, into its ``backup_dir``: the next ``fit()`` with the same BackupAndRestore
restores the weights and optimizer state and starts again at the epoch that was
interrupted. With ``filepath=``, ``model.save(filepath)`` (a ``.keras`` file, or weights
only when it ends in ``.weights.h5``). Give one of the two.

``agreement``: a :class:`training_watchdog.distributed.Agreement` when several workers
must save at the same batch (see docs/frameworks.md); by default each batch end checks
this process's request only, unless ``torch.distributed`` is initialized.

A CUDA out-of-memory error ends ``fit()`` with no callback told, so the last-chance save
is a context manager around it: ``with last_chance(watchdog): model.fit(..., callbacks=[...,
watchdog])`` saves through that callback before the error goes on (see :class:`last_chance`).

SIGTERM reaching the run itself (``scancel``, systemd's ``KillMode=control-group``, a VM's
shutdown; see docs/notices.md): with ``on_term="save"`` the callback takes SIGTERM at train
begin (a handler that only sets a flag); the next batch end saves as for any request,
acknowledges (``cause="terminating"``, or answering the watchdog's notice), and SIGTERM is
then raised again with its earlier disposition: the process ends with status 143 inside
that batch end (callbacks after this one do not see it). Keras has no SIGTERM handling of
its own; without ``on_term`` SIGTERM ends the run at once, unsaved.

Imports keras; the rest of the package does not.
"""

import keras

import training_watchdog as _tw
from training_watchdog import _messages, _signals
from training_watchdog import allocator as _allocator
from training_watchdog import oom as _oom
from training_watchdog.distributed import Agreement

__all__ = ["WatchdogCallback", "last_chance"]


class WatchdogCallback(keras.callbacks.Callback):
    """Save through ``backup`` (a BackupAndRestore) or to ``filepath`` when the watchdog asks.

    ``sig``: the signal to catch (default ``WATCHDOG_SIGNAL``, else SIGUSR1).
    ``agreement``: see the module documentation. After a save, ``saves`` counts the
    checkpoints written and ``last_saved`` is ``(epoch, batch)`` of the last one (batch
    None for a save at the start of an evaluation, when a request is pending then). It
    reports the allocator's figures at each training and test batch end
    (:mod:`training_watchdog.allocator`); ``reset_peak=False`` leaves the allocator's peak
    alone (nothing in Keras reads it, so it is reset between batches by default).
    ``on_term="save"``: SIGTERM is saved for too, and the process then ends with it
    (status 143; see the module documentation).
    """

    def __init__(self, backup=None, filepath=None, sig=None, agreement=None, reset_peak=True, on_term=None):
        super().__init__()
        _signals._check_on_term(on_term)
        self.on_term = on_term
        if (backup is None) == (filepath is None):
            raise ValueError(
                "WatchdogCallback needs one of backup= (a keras.callbacks.BackupAndRestore) "
                "or filepath= (where model.save writes), not %s"
                % ("both" if backup is not None else "neither")
            )
        if backup is not None and not callable(getattr(backup, "_save_model", None)):
            raise TypeError(
                "backup= must be a keras.callbacks.BackupAndRestore (with _save_model), got %r"
                % (backup,)
            )
        self.backup = backup
        self.filepath = None if filepath is None else str(filepath)
        self.sig = sig
        self.agreement = agreement if agreement is not None else Agreement()
        self.saves = 0
        self.reset_peak = reset_peak
        self.last_saved = None
        self._epoch = 0
        self._step = 0
        self._fitting = False

    def on_train_begin(self, logs=None):
        _tw.install(self.sig, on_term=self.on_term)
        self._fitting = True

    def on_train_end(self, logs=None):
        self._fitting = False
        _allocator.flush()
        if self.on_term is not None:
            _signals._release_term()  # a SIGTERM that came ends the process now

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        step = self._step
        self._step += 1
        _allocator.report_step(step, "train", reset_peak=self.reset_peak)
        if not self.agreement.requested(step):
            return
        self._save_requested(batch)

    def on_test_begin(self, logs=None):
        # An evaluation's peak can be the one that fails: a pending request is saved before
        # it (within fit(): a standalone evaluate() has no training to save).
        if self._fitting and self.agreement.requested_now():
            self._save_requested(None)

    def on_test_batch_end(self, batch, logs=None):
        _allocator.report_step(batch, "eval", reset_peak=self.reset_peak)

    def _save_requested(self, batch):
        """Saves for a request and acknowledges with the checkpoint's path and step."""
        path, global_step = self._save()
        self.last_saved = (self._epoch, batch)
        self.agreement.acknowledge(path=path, step=global_step)

    def _save(self):
        """Saves through the backup or to ``filepath``; returns ``(path, step)``: the backup
        directory or the file, and the optimizer's ``iterations``."""
        if self.model is None:
            raise RuntimeError("this WatchdogCallback was not given to fit(): it has no model to save")
        if self.backup is not None:
            # BackupAndRestore records the epoch being trained (its own counter, which it
            # moves on at epoch end) with the weights: a resumed fit() starts that epoch again.
            self.backup._save_model()
            path = str(self.backup.backup_dir)
        elif self.filepath.endswith(".weights.h5"):
            self.model.save_weights(self.filepath, overwrite=True)
            path = self.filepath
        else:
            self.model.save(self.filepath, overwrite=True)
            path = self.filepath
        self.saves += 1
        return path, self._global_step()

    def _global_step(self):
        """The optimizer's ``iterations`` (batches trained over every fit, saved with the
        weights); the batches of this fit when there is no optimizer."""
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return self._step
        return int(keras.ops.convert_to_numpy(iterations))


class last_chance(_oom.LastChance):  # noqa: N801  (used as a function: ``with last_chance(cb):``)
    """Around ``model.fit()``: on a CUDA out-of-memory error, save through ``callback`` (the
    :class:`WatchdogCallback` given to that ``fit``: its BackupAndRestore, or its
    ``filepath``), acknowledge with ``cause="cuda_oom"``, and let the error go on::

        watchdog = WatchdogCallback(backup=backup)
        with training_watchdog.keras.last_chance(watchdog):
            model.fit(x, y, epochs=10, callbacks=[backup, watchdog])

    Through a BackupAndRestore the next ``fit()`` starts again at the beginning of the
    epoch that was interrupted. The ack's ``step`` is the optimizer's ``iterations``.
    ``timeout``: the seconds the save may take (:mod:`training_watchdog.oom`).
    """

    def __init__(self, callback, timeout=_oom.DEFAULT_TIMEOUT_S):
        super().__init__(timeout=timeout)
        if not isinstance(callback, WatchdogCallback):
            raise TypeError("last_chance(callback=%s): expected the training_watchdog.keras.WatchdogCallback "
                            "given to fit()" % _messages._safe_repr(callback))
        self.callback = callback

    def _current_step(self):
        try:
            return self.callback._global_step()
        except Exception:
            return None

    def _save(self):
        return self.callback._save()
