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

Imports transformers; the rest of the package does not.
"""

import json
import os
import re

from transformers import TrainerCallback

import training_watchdog as _tw
from training_watchdog import resume as _resume
from training_watchdog.distributed import DEFAULT_EVERY, Agreement

__all__ = ["WatchdogCallback", "resume_checkpoint"]

# The Trainer's checkpoint directories, and the file its _save_checkpoint writes last.
_CHECKPOINT = re.compile(r"^checkpoint-([0-9]+)$")
_STATE = "trainer_state.json"


def resume_checkpoint(output_dir):
    """The checkpoint ``train(resume_from_checkpoint=...)`` should resume from, or None.

    ``WATCHDOG_RESUME_FROM`` when ``watchdog run --restart`` set it (the last checkpoint
    acknowledged before the previous attempt died) and it is a complete ``checkpoint-N`` in
    ``output_dir``; else the complete ``checkpoint-N`` with the highest N; else None (a fresh
    start; also when ``output_dir`` does not exist). Complete: its ``trainer_state.json``,
    which the Trainer writes after the model, optimizer, scheduler and RNG state, is there
    and parses with a ``global_step``. ``transformers.trainer_utils.get_last_checkpoint``
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
    """The ``global_step`` in ``path/trainer_state.json``, or None when it is missing or cut short."""
    try:
        with open(os.path.join(path, _STATE), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


class WatchdogCallback(TrainerCallback):
    """Set ``control.should_save`` at the step end after a request; acknowledge on save.

    ``every``: steps between two agreements of the ranks when there are several. ``sig``:
    the signal to catch (default ``WATCHDOG_SIGNAL``, else SIGUSR1). ``saved_steps``: the
    global steps saved at because of a request.
    """

    def __init__(self, every=DEFAULT_EVERY, sig=None):
        self.agreement = Agreement(every)
        self.sig = sig
        self.saved_steps = []
        self._asked = False

    def on_train_begin(self, args, state, control, **kwargs):
        _tw.install(self.sig)

    def on_step_end(self, args, state, control, **kwargs):
        if self.agreement.requested(state.global_step):
            control.should_save = True
            self._asked = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._asked:
            self._asked = False
            self.saved_steps.append(state.global_step)
            self.agreement.acknowledge()
        return control
