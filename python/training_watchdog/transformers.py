"""Hugging Face Trainer callback: save a checkpoint at the next step when the watchdog asks.

::

    from transformers import Trainer, TrainingArguments
    from training_watchdog.transformers import WatchdogCallback

    args = TrainingArguments(output_dir="out", save_total_limit=2)
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[WatchdogCallback()])
    trainer.train(resume_from_checkpoint=last_checkpoint)   # see docs/frameworks.md

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

from transformers import TrainerCallback

import training_watchdog as _tw
from training_watchdog.distributed import DEFAULT_EVERY, Agreement

__all__ = ["WatchdogCallback"]


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
