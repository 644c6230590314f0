"""Hugging Face Trainer callback: save a checkpoint at the next step when the watchdog asks.

::

    from transformers import Trainer, TrainingArguments
    from training_watchdog.transformers import WatchdogCallback, resume_checkpoint

    args = TrainingArguments(output_dir="out", save_total_limit=2)
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[WatchdogCallback()])
    trainer.train(resume_from_checkpoint=resume_checkpoint("out"))   # None on a first run

At every step end the callback checks :func:`training_watchdog.checkpoint_requested` (the
signal's flag, or one ``stat`` of the request file); when asked it sets
``control.should_save``, so the Trainer writes ``checkpoint-N`` in ``output_dir`` (model,
optimizer, scheduler, RNG and trainer state: ``train(resume_from_checkpoint=...)``
resumes at step N), and acknowledges in ``on_save``, once the checkpoint is written. Its
``save_total_limit`` applies: asked again and again, the run does not fill the disk.

The Trainer's ``enable_jit_checkpoint`` is a different thing: it reacts to SIGTERM only,
when the run is already being stopped, and skips ``on_save``; this callback saves while
the run goes on, before the resource runs out. Both can be on.

Several processes (``torchrun``, ``accelerate launch``): the ranks agree every ``every``
steps (:data:`training_watchdog.distributed.DEFAULT_EVERY`) through one all-reduce, so when
any rank is asked all save at the same step (the Trainer's save is a collective).

A CUDA out-of-memory error ends ``train()`` with no callback told, so the last-chance save
is a context manager around it: ``with last_chance(trainer): trainer.train(...)`` saves
``checkpoint-N`` by the failing rank alone before the error goes on (see :class:`last_chance`).

SIGTERM reaching the run itself (``scancel``, systemd's ``KillMode=control-group``, a VM's
shutdown; see docs/notices.md): with ``on_term="save"`` the callback takes SIGTERM at train
begin (a handler that only sets a flag). The next step end asks the Trainer to save as for
any request (``checkpoint-N``), ``on_save`` acknowledges (``cause="terminating"``, or
answering the watchdog's notice), and once every callback's ``on_save`` has run (at the next
step begin, epoch end or train end) SIGTERM is raised again with its earlier disposition:
the process ends with status 143. Without ``on_term``, SIGTERM ends the run at once, unsaved,
as before. With ``TrainingArguments(enable_jit_checkpoint=True)`` the Trainer's own SIGTERM
handler stays in charge (it waits 3 s, saves without ``on_save`` and ends ``train()``
normally): ``on_term`` is then ignored, with a warning.

Imports transformers; the rest of the package does not.
"""

import os
import re
import sys
import warnings

from transformers import Trainer, TrainerCallback

import training_watchdog as _tw
from training_watchdog import _messages, _signals
from training_watchdog import allocator as _allocator
from training_watchdog import oom as _oom
from training_watchdog import resume as _resume
from training_watchdog.distributed import DEFAULT_EVERY, Agreement

__all__ = ["WatchdogCallback", "last_chance", "resume_checkpoint"]

# The Trainer's checkpoint directories, and the file its _save_checkpoint writes last.
_CHECKPOINT = re.compile(r"^checkpoint-([0-9]+)$")
_STATE = "trainer_state.json"
#: The largest ``trainer_state.json`` read: its ``log_history`` grows by an entry per logging
#: step (about 200 bytes), so 64 MiB is some 300,000 of them; a bigger one is passed over, said.
MAX_STATE_BYTES = 64 * 1024 * 1024


def resume_checkpoint(output_dir):
    """The checkpoint ``train(resume_from_checkpoint=...)`` should resume from, or None.

    ``WATCHDOG_RESUME_FROM`` when ``watchdog run --restart`` set it (the last checkpoint
    acknowledged before the previous attempt died) and it is a complete ``checkpoint-N`` in
    ``output_dir``; else this run key's newest complete checkpoint in ``output_dir`` in the
    watchdog's checkpoint record (:mod:`training_watchdog.record`: what a requeued job or a
    rerun by hand had acknowledged); else the complete ``checkpoint-N`` with the highest N
    that no other run key claims in the record; else None (a fresh start; also when
    ``output_dir`` does not exist). Complete: its ``trainer_state.json``,
    which the Trainer writes after the model, optimizer, scheduler and RNG state, is there
    and parses with a ``global_step``, and is a regular file (not a link, a FIFO never
    waited on) of at most :data:`MAX_STATE_BYTES`. ``transformers.trainer_utils.get_last_checkpoint``
    only asks for a directory, so it picks a checkpoint the run died writing. Says on
    stderr which one, and its step.
    """
    output_dir = str(output_dir)

    def candidates():
        try:
            names = os.listdir(output_dir)
        except OSError:
            return []
        found = []
        for name in names:
            m = _CHECKPOINT.match(name)
            if m and os.path.isdir(os.path.join(output_dir, name)):
                found.append((int(m.group(1)), os.path.join(output_dir, name)))
        return found

    return _resume.choose(output_dir, candidates, lambda p: _global_step(p) is not None, _global_step,
                          "Trainer checkpoint (checkpoint-N with its trainer_state.json)")


def _global_step(path):
    """The ``global_step`` in ``path/trainer_state.json``, or None when it is missing, cut short,
    or not a regular file of at most :data:`MAX_STATE_BYTES` (:func:`training_watchdog.resume.read_json`:
    never through a link, never waiting on a FIFO)."""
    state = _resume.read_json(os.path.join(path, _STATE), MAX_STATE_BYTES)
    step = state.get("global_step") if state is not None else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


class WatchdogCallback(TrainerCallback):
    """Set ``control.should_save`` at the step end after a request; acknowledge on save.

    ``every``: steps between two agreements of the ranks when there are several. ``sig``:
    the signal to catch (default ``WATCHDOG_SIGNAL``, else SIGUSR1). ``saved_steps``: the
    global steps saved at because of a request.

    It reports the allocator's figures at each step end and evaluation step
    (:mod:`training_watchdog.allocator`); ``reset_peak``: reset the allocator's peak
    between steps (default: unless ``TrainingArguments.skip_memory_metrics`` is False,
    as the Trainer's memory metrics read it). When an evaluation is due at a step and a
    request is pending, the callback saves before the evaluation (see
    :meth:`_save_before_evaluation`). ``on_term="save"``: SIGTERM is saved for too, and the
    process then ends with it (status 143; see the module documentation).
    """

    def __init__(self, every=DEFAULT_EVERY, sig=None, reset_peak=None, on_term=None):
        _signals._check_on_term(on_term)
        self.on_term = on_term
        self.agreement = Agreement(every)
        self.sig = sig
        self.saved_steps = []
        self._asked = False
        self.reset_peak = reset_peak
        self._trainer = None
        self._eval_batch = 0

    def on_train_begin(self, args, state, control, **kwargs):
        signum = _tw.install(self.sig)
        self._trainer = _calling_trainer()
        if self.on_term is not None:
            _signals._check_term_signal(signum, self.on_term)
            if getattr(args, "enable_jit_checkpoint", False):
                warnings.warn(
                    "training_watchdog.transformers.WatchdogCallback(on_term=%r) is ignored: "
                    "TrainingArguments(enable_jit_checkpoint=True) handles SIGTERM itself; turn "
                    "one of the two off" % (self.on_term,), RuntimeWarning, stacklevel=2)
            else:
                _signals._take_sigterm(deferred=True)

    def on_step_begin(self, args, state, control, **kwargs):
        self._end_if_saved()

    def _end_if_saved(self):
        """After a save that answered SIGTERM, once every callback's ``on_save`` ran: the end."""
        if self.on_term is not None and _signals._term_saved:
            _signals._end_by_sigterm()

    def on_step_end(self, args, state, control, **kwargs):
        self._eval_batch = 0
        _allocator.report_step(state.global_step, "train", reset_peak=self._reset_peak(args))
        if control.should_evaluate and self._save_before_evaluation(args, state, control):
            return control
        if self.agreement.requested(state.global_step):
            control.should_save = True
            self._asked = True
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        self._end_if_saved()
        if control.should_evaluate:
            self._save_before_evaluation(args, state, control)
        return control

    def on_prediction_step(self, args, state, control, **kwargs):
        _allocator.report_step(self._eval_batch, "eval", reset_peak=self._reset_peak(args))
        self._eval_batch += 1

    def on_evaluate(self, args, state, control, **kwargs):
        self._eval_batch = 0

    def on_train_end(self, args, state, control, **kwargs):
        _allocator.flush()
        if self.on_term is not None:
            _signals._release_term()  # a SIGTERM that came ends the process now

    def _reset_peak(self, args):
        if self.reset_peak is not None:
            return self.reset_peak
        return getattr(args, "skip_memory_metrics", True) is not False

    def _save_before_evaluation(self, args, state, control):
        """Save now, before the evaluation due at this step, when a request is pending (on
        every rank: all reach a step with an evaluation together). The Trainer evaluates
        before it saves (``_maybe_log_save_evaluate``), and the evaluation's peak may be
        the one that fails, so ``control.should_save`` would save too late: the callback
        calls the Trainer's own ``_save_checkpoint`` (the checkpoint ``should_save`` writes:
        ``checkpoint-N``, resumable with ``train(resume_from_checkpoint=...)``), then the
        callbacks' ``on_save``. Without the Trainer (not found) it returns False and the
        request is saved after the evaluation, as any other."""
        trainer = self._trainer
        if trainer is None or not callable(getattr(trainer, "_save_checkpoint", None)):
            return False
        if not self.agreement.requested_now():
            return False
        trainer._save_checkpoint(trainer.model_wrapped, None)
        self._asked = True
        trainer.callback_handler.on_save(args, state, control)
        return True

    def on_save(self, args, state, control, **kwargs):
        if self._asked:
            self._asked = False
            self.saved_steps.append(state.global_step)
            self.agreement.acknowledge(path=_checkpoint_dir(args.output_dir, state.global_step),
                                       step=state.global_step)
        return control


def _calling_trainer():
    """The Trainer whose ``train()`` is calling this callback (its ``self`` in a frame up the
    stack), or None: callbacks are not given their Trainer."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def _checkpoint_dir(run_dir, step):
    """``run_dir/checkpoint-N``: where the Trainer saves step N."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(str(run_dir), "%s-%d" % (PREFIX_CHECKPOINT_DIR, step))


class last_chance(_oom.LastChance):  # noqa: N801  (used as a function: ``with last_chance(trainer):``)
    """Around ``trainer.train()``: on a CUDA out-of-memory error, save ``checkpoint-N``
    (N the global step: ``train(resume_from_checkpoint=...)`` resumes there) by this rank
    alone, acknowledge with ``cause="cuda_oom"``, and let the error go on::

        with training_watchdog.transformers.last_chance(trainer):
            trainer.train(resume_from_checkpoint=last)

    One process: the Trainer's own ``_save_checkpoint`` (a private method; tested with
    the version pinned in scripts/frameworks-requirements.txt). Several (DDP): the same
    files written by the failing rank alone, without the Trainer's collectives. FSDP,
    DeepSpeed and tensor parallelism shard the state: refused, nothing saved (logged).
    ``timeout``: the seconds the save may take (:mod:`training_watchdog.oom`). After a save,
    ``path`` and ``saved_step`` say what was written.
    """

    def __init__(self, trainer, timeout=_oom.DEFAULT_TIMEOUT_S):
        super().__init__(timeout=timeout)
        if not callable(getattr(trainer, "train", None)) or not hasattr(trainer, "state"):
            raise TypeError("last_chance(trainer=%s): expected a transformers.Trainer" % _messages._safe_repr(trainer))
        self.trainer = trainer

    def _current_step(self):
        return self.trainer.state.global_step

    def _save(self):
        return _save_alone(self.trainer)


def _save_alone(trainer):
    """Saves ``checkpoint-N`` without a collective; returns ``(path, N)``."""
    step = trainer.state.global_step
    path = _checkpoint_dir(trainer._get_output_dir(trial=None), step)
    if trainer.args.world_size <= 1:
        save = getattr(trainer, "_save_checkpoint", None)
        if not callable(save):
            raise RuntimeError("this transformers has no Trainer._save_checkpoint (tested with the version "
                               "pinned in scripts/frameworks-requirements.txt)")
        save(trainer.model, trial=None)
    else:
        _save_replicated(trainer, path)
    return path, step


def _save_replicated(trainer, path):
    """What ``_save_checkpoint`` writes, by one rank of several, for a replicated (DDP) state:
    the model, optimizer, scheduler, scaler, this rank's RNG and the trainer state. The
    Trainer's own save writes only on rank 0 and gathers the FLOPs of every rank first."""
    import safetensors.torch
    import torch
    from transformers import trainer as hf

    if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled or getattr(trainer.model, "_tp_size", None):
        what = ("FSDP" if trainer.is_fsdp_enabled else
                "DeepSpeed" if trainer.is_deepspeed_enabled else "Tensor parallelism")
        raise _oom.sharded(what, trainer.args.world_size)
    os.makedirs(path, exist_ok=True)
    model = trainer.accelerator.unwrap_model(trainer.model, keep_torch_compile=False)
    if callable(getattr(model, "save_pretrained", None)):
        model.save_pretrained(path, is_main_process=True)
    else:
        safetensors.torch.save_file(model.state_dict(), os.path.join(path, hf.SAFE_WEIGHTS_NAME),
                                    metadata={"format": "pt"})
    torch.save(trainer.args, os.path.join(path, hf.TRAINING_ARGS_NAME))
    if not trainer.args.save_only_model:
        torch.save(trainer.optimizer.state_dict(), os.path.join(path, hf.OPTIMIZER_NAME))
        if trainer.lr_scheduler is not None:
            torch.save(trainer.lr_scheduler.state_dict(), os.path.join(path, hf.SCHEDULER_NAME))
        scaler = getattr(trainer.accelerator, "scaler", None)
        if scaler is not None:
            torch.save(scaler.state_dict(), os.path.join(path, hf.SCALER_NAME))
        trainer._save_rng_state(path)  # rng_state_<rank>.pth: the other ranks' are not there
    trainer.state.save_to_json(os.path.join(path, hf.TRAINER_STATE_NAME))
