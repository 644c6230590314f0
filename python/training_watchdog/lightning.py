"""Lightning callback: save through the trainer at the next batch end when the watchdog asks.

::

    import lightning as L
    from training_watchdog.lightning import WatchdogCallback, latest_checkpoint

    watchdog = WatchdogCallback(dirpath="checkpoints")
    trainer = L.Trainer(max_epochs=10, callbacks=[watchdog])
    trainer.fit(model, ckpt_path=latest_checkpoint("checkpoints"))   # None on a first run

At the end of every training batch the callback checks whether a checkpoint was requested
(:func:`training_watchdog.checkpoint_requested`: the signal's flag, or one ``stat`` of the
request file); when it was, it calls ``trainer.save_checkpoint`` (model, optimizer, loops,
callbacks: ``fit(ckpt_path=...)`` resumes mid-epoch from it) and acknowledges. It keeps
only the newest of its own checkpoints (``watchdog-step=N.ckpt``): a run that is asked
again and again does not fill the disk.

Several ranks (DDP, FSDP, any strategy, one node or several): the ranks agree through
the strategy (``reduce_boolean_decision``, an all-reduce of one number) every ``every``
training steps (:data:`training_watchdog.distributed.DEFAULT_EVERY`), so when any rank is
asked, all save at the same step; a rank that saved alone would hang the others.

SLURM and Lightning's own SIGUSR1 handler: under SLURM with auto-requeue (the default when
``SLURM_JOB_ID``/``SLURM_NTASKS`` are set), Lightning catches its requeue signal (SIGUSR1,
which is also the watchdog's default), saves ``hpc_ckpt_N.ckpt`` *inside the handler* and
runs ``scontrol requeue``: the job is put back in the queue and killed. A memory alert must
not do that. When the watchdog's signal is Lightning's requeue signal, the callback
installs, after Lightning's, a handler that looks at the request file (written by the
watchdog before it signals): a pending request means the signal is the watchdog's, and the
callback saves at the next batch end without calling Lightning's handler; no request means
the signal is SLURM's (``--signal=USR1@90``), and Lightning's handler runs as before. That
needs ``WATCHDOG_REQUEST_FILE`` (``watchdog run`` and ``attach()`` set it). Simplest of all:
give the watchdog another signal (``watchdog --signal SIGUSR2 run -- ...``) and the two
never meet. Elsewhere (no SLURM, or no auto-requeue) the callback installs its flag-only
handler in ``setup``, before Lightning registers its own handlers.

A CUDA out-of-memory error during ``fit`` is saved by ``on_exception`` before it ends the
run (the last-chance save, :mod:`training_watchdog.oom`): ``watchdog-step=N.ckpt`` by the
failing rank alone, with no collective (refused for sharded strategies), acknowledged with
``cause="cuda_oom"``; Lightning then raises the error again.

SIGTERM reaching the run itself (``scancel``, systemd's ``KillMode=control-group``, a VM's
shutdown; see docs/notices.md): with ``on_term="save"`` the callback takes SIGTERM in
``setup`` (a handler that only sets a flag), before Lightning's own, which chains it and
raises ``SIGTERMException`` at the next batch end. The batch end saves
``watchdog-step=N.ckpt`` as for any request (acknowledged with ``cause="terminating"``, or
answering the watchdog's notice); where Lightning raises ``SIGTERMException`` before a batch
end saw the flag (validation, an epoch end, the ranks' SIGTERM broadcast), ``on_exception``
saves. Lightning then finishes as it does for ``SIGTERMException`` (callbacks told, loggers
finalized, its handlers put back) and the exception leaves ``fit()``; at interpreter exit
SIGTERM is raised again with its earlier disposition: status 143, not the 0 of a bare
``SIGTERMException`` (a ``SystemExit``), which a Kubernetes Job or SLURM would take for
success. A fit that ends normally after the SIGTERM ends the process at ``teardown``.
Without ``on_term``, Lightning's handling is unchanged: ``SIGTERMException``, exit status 0,
nothing saved.

Imports lightning; the rest of the package does not.
"""

import glob
import os
import re
import signal

import lightning.pytorch as pl
from lightning.pytorch.callbacks import DeviceStatsMonitor
from lightning.pytorch.utilities.exceptions import SIGTERMException

import training_watchdog as _tw
from training_watchdog import _signals, _units
from training_watchdog import allocator as _allocator
from training_watchdog import oom as _oom
from training_watchdog import resume as _resume
from training_watchdog.distributed import DEFAULT_EVERY, Agreement

__all__ = ["WatchdogCallback", "latest_checkpoint"]

# ``step=N`` in a checkpoint's file name: ours (watchdog-step=N.ckpt) and ModelCheckpoint's default.
_STEP = re.compile(r"(?:^|[-_])step=([0-9]+)(?![0-9])")


def latest_checkpoint(dirpath):
    """The checkpoint ``fit(ckpt_path=...)`` should resume from, or None for a fresh start.

    ``WATCHDOG_RESUME_FROM`` when ``watchdog run --restart`` set it (the last checkpoint
    acknowledged before the previous attempt died) and it is a complete ``.ckpt`` in
    ``dirpath``; else this run key's newest complete checkpoint in ``dirpath`` in the
    watchdog's checkpoint record (:mod:`training_watchdog.record`: what a requeued job or a
    rerun by hand had acknowledged); else the complete ``.ckpt`` in ``dirpath`` with the
    highest ``step=N`` in its name (the callback's ``watchdog-step=N.ckpt``,
    ModelCheckpoint's ``epoch=E-step=N.ckpt``; the newest file on a tie) that no other run
    key claims in the record; else None. Complete: a whole
    ``torch.save`` zip (:func:`training_watchdog.resume.whole_torch_zip`), so a file the
    run died writing is never chosen. Says on stderr which one, and its step.
    """
    dirpath = str(dirpath)

    def candidates():
        found = []
        for path in glob.glob(os.path.join(glob.escape(dirpath), "*.ckpt")):
            m = _STEP.search(os.path.basename(path))
            if m and os.path.isfile(path):
                found.append((int(m.group(1)), path))
        return found

    return _resume.choose(dirpath, candidates, _complete, _step_of, "Lightning .ckpt")


def _complete(path):
    return _resume.whole_torch_zip(path)  # a regular file, opened without blocking


def _step_of(path):
    """The global step in a checkpoint's name, else in the checkpoint itself (mapped, not read)."""
    m = _STEP.search(os.path.basename(path))
    if m:
        return int(m.group(1))
    try:
        import torch

        step = torch.load(path, map_location="cpu", mmap=True, weights_only=False).get("global_step")
    except Exception:
        return None
    return step if isinstance(step, int) else None


def _requeue_signal(trainer):
    """Lightning's SLURM requeue signal when auto-requeue is on for this trainer, else None."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    connector = getattr(trainer, "_accelerator_connector", None)
    env = getattr(connector, "cluster_environment", None)
    if isinstance(env, SLURMEnvironment) and env.auto_requeue:
        return env.requeue_signal
    return None


class WatchdogCallback(pl.Callback):
    """Save ``dirpath/watchdog-step=N.ckpt`` at the next training batch end after a request.

    ``dirpath``: where (default: the ModelCheckpoint's directory, else
    ``<default_root_dir>/checkpoints``). ``every``: steps between two agreements of the
    ranks when there are several. ``sig``: the signal to catch (default ``WATCHDOG_SIGNAL``,
    else SIGUSR1). After a save, ``last_path`` is the file and ``saved_steps`` the global
    steps saved at. It also saves at the start of a validation when a request is pending,
    and reports the allocator's figures at each training and validation batch end
    (:mod:`training_watchdog.allocator`); ``reset_peak``: reset the allocator's peak
    between batches (default: unless a ``DeviceStatsMonitor`` is among the trainer's
    callbacks, which reads it). ``on_term="save"``: SIGTERM is saved for too, and the
    process then ends with it (status 143; see the module documentation).
    """

    def __init__(self, dirpath=None, every=DEFAULT_EVERY, sig=None, reset_peak=None, on_term=None):
        super().__init__()
        _signals._check_on_term(on_term)
        self.on_term = on_term
        self.dirpath = None if dirpath is None else str(dirpath)
        self.every = every
        self.sig = sig
        self.last_path = None
        self.saved_steps = []
        self.agreement = None
        self._share_with_lightning = False
        self.reset_peak = reset_peak
        Agreement(every)  # validates ``every`` now rather than at fit()

    def setup(self, trainer, pl_module, stage):
        if stage != "fit":
            return
        signum = _units._checkpoint_signal(self.sig)[0]
        self._share_with_lightning = _requeue_signal(trainer) == signum
        if not self._share_with_lightning:
            _tw.install(signum)
        if self.on_term is not None:
            _signals._check_term_signal(signum, self.on_term)
            # Before Lightning's handler (registered after setup), which keeps ours in its chain.
            _signals._take_sigterm(deferred=True)
        strategy = trainer.strategy
        self.agreement = Agreement(
            self.every,
            reduce_any=lambda flag: bool(strategy.reduce_boolean_decision(bool(flag), all=False)),
            world_size=trainer.world_size,
        )

    def on_train_start(self, trainer, pl_module):
        if self._share_with_lightning:
            self._install_dispatcher(_units._checkpoint_signal(self.sig)[0])

    @staticmethod
    def _install_dispatcher(signum):
        lightning_handler = signal.getsignal(signum)

        def dispatch(num, frame):
            # The watchdog writes its request file before it signals: a pending request
            # means this signal is the watchdog's, saved at the next batch end.
            if _tw.checkpoint_requested():
                return
            if callable(lightning_handler):
                lightning_handler(num, frame)

        signal.signal(signum, dispatch)

    def _dir(self, trainer):
        if self.dirpath is not None:
            return self.dirpath
        cb = trainer.checkpoint_callback
        if cb is not None and getattr(cb, "dirpath", None):
            return str(cb.dirpath)
        return os.path.join(str(trainer.default_root_dir), "checkpoints")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._report(trainer, trainer.global_step, "train", batch)
        if self.agreement is None or not self.agreement.requested(trainer.global_step):
            return
        self._save(trainer)

    def on_validation_start(self, trainer, pl_module):
        # An evaluation's peak can be the one that fails: a pending request is saved before it.
        if self.agreement is None or trainer.sanity_checking or not self.agreement.requested_now():
            return
        self._save(trainer)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._report(trainer, batch_idx, "eval", batch)

    def _report(self, trainer, step, phase, batch):
        reset = self.reset_peak
        if reset is None:
            reset = not any(isinstance(cb, DeviceStatsMonitor) for cb in trainer.callbacks)
        batch_size, tokens = _allocator.batch_shape(batch)
        _allocator.report_step(step, phase, batch_size, tokens, reset_peak=reset)

    def _save(self, trainer):
        path = os.path.join(self._dir(trainer), "watchdog-step=%d.ckpt" % trainer.global_step)
        trainer.save_checkpoint(path)
        previous, self.last_path = self.last_path, path
        self.saved_steps.append(trainer.global_step)
        # Acknowledged before the older one goes: a run that dies between the two still has
        # the checkpoint the watchdog last saw acknowledged (its WATCHDOG_RESUME_FROM).
        self.agreement.acknowledge(path=path, step=trainer.global_step)
        if previous is not None and previous != path:
            trainer.strategy.remove_checkpoint(previous)

    def on_exception(self, trainer, pl_module, exception):
        """The last-chance save: a CUDA out-of-memory error in ``fit`` is saved to
        ``watchdog-step=N.ckpt`` (N the global step: ``fit(ckpt_path=...)`` resumes there)
        by this rank alone, then acknowledged with ``cause="cuda_oom"``; Lightning then
        raises the error again. See :mod:`training_watchdog.oom`."""
        if getattr(trainer.state, "fn", None) != "fit":
            return
        if self.on_term is not None and isinstance(exception, SIGTERMException):
            if _signals._term_pending():
                self._save_on_term(trainer)
            return  # the process ends at exit, with SIGTERM (status 143)
        _oom.rescue(exception, lambda: self._save_alone(trainer), step=trainer.global_step,
                    phase=_phase(trainer))
        if self.on_term is not None:
            _signals._release_term()

    def teardown(self, trainer, pl_module, stage):
        # fit() ended normally: SIGTERM goes back to what it was, or ends the process if it came.
        if stage == "fit" and self.on_term is not None:
            _signals._release_term()

    def _save_on_term(self, trainer):
        """The save for a SIGTERM that Lightning's ``SIGTERMException`` reached before a batch
        end did. One process: through the trainer. Several: rank 0 writes the replicated (DDP)
        state alone (the ranks may not all be here); a sharded state is refused (logged)."""
        try:
            if trainer.world_size <= 1:
                path, step = self._save_alone(trainer)
            elif trainer.global_rank == 0:
                path, step = self._save_alone(trainer)
            else:
                path, step = None, None
        except Exception as e:
            _oom._log("the save after SIGTERM failed: %s: %s" % (type(e).__name__, e))
            return
        if path is not None:
            _tw.acknowledge(path=path, step=step)

    def _save_alone(self, trainer):
        """Saves without a collective; returns ``(path, step)``. With several ranks only a
        replicated state (DDP) can be: a sharded one is refused (a RuntimeError saying why)."""
        step = trainer.global_step
        path = os.path.join(self._dir(trainer), "watchdog-step=%d.ckpt" % step)
        if trainer.world_size <= 1:
            trainer.save_checkpoint(path)  # its barrier is a no-op with one process
        else:
            _refuse_sharded(trainer)
            # What Trainer.save_checkpoint does, without its barrier and without leaving the
            # write to rank 0: the failing rank holds the whole replicated state.
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
            trainer.strategy.checkpoint_io.save_checkpoint(checkpoint, path)
        # The previous checkpoint is kept: the last-chance save is made in a failing process.
        self.last_path = path
        self.saved_steps.append(step)
        return path, step


def _phase(trainer):
    """``train``, ``eval`` or ``other``: what the trainer was running (its ``state.stage``)."""
    stage = str(getattr(trainer.state.stage, "value", trainer.state.stage))
    return {"train": "train", "validate": "eval", "sanity_check": "eval"}.get(stage, "other")


def _refuse_sharded(trainer):
    """Raises unless one rank holds the whole state: DDP (not DeepSpeed, which derives from
    it), and no optimizer whose state is sharded across ranks (ZeroRedundancyOptimizer)."""
    from lightning.pytorch.strategies import DDPStrategy

    strategy = trainer.strategy
    sharded = not isinstance(strategy, DDPStrategy) or "deepspeed" in type(strategy).__name__.lower()
    optimizer = next((o for o in trainer.optimizers if hasattr(o, "consolidate_state_dict")), None)
    if sharded or optimizer is not None:
        what = type(optimizer).__name__ if optimizer is not None and not sharded else type(strategy).__name__
        raise _oom.sharded(what, trainer.world_size)
