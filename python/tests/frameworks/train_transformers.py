"""Hugging Face Trainer: train_transformers.py leak|resume WORKDIR (see common.py)."""

import os
import sys
import time

import common  # noqa: F401  (puts training_watchdog on sys.path)

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from tiny_transformers import Data, Model
from transformers.trainer_utils import get_last_checkpoint

from training_watchdog.transformers import WatchdogCallback

mode, workdir = sys.argv[1], sys.argv[2]
out_dir = os.path.join(workdir, "out")


class Probe(TrainerCallback):
    """After WatchdogCallback: leaks, notices the save, records the state."""

    def __init__(self, watchdog):
        self.watchdog, self.leak, self.model = watchdog, common.Leak(), None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model = model
        if mode == "resume":
            common.write_json(os.path.join(workdir, "resumed.json"), {
                "step": state.global_step, "digest": common.torch_digest(model)})

    def on_step_end(self, args, state, control, **kwargs):
        if mode == "leak":
            self.leak.maybe_die()
            self.leak.step(state.global_step)
            time.sleep(0.02)

    def on_save(self, args, state, control, **kwargs):
        # runs after WatchdogCallback.on_save: the checkpoint is on disk
        if mode == "leak" and self.leak.saved_at is None and self.watchdog.saved_steps:
            self.leak.saved_at = state.global_step
            self.leak.saved(workdir, {"step": self.watchdog.saved_steps[-1],
                                      "path": os.path.join(out_dir, "checkpoint-%d" % state.global_step),
                                      "digest": common.torch_digest(self.model)})


torch.manual_seed(0)
resume_from = None
max_steps = 100000
if mode == "resume":
    resume_from = get_last_checkpoint(out_dir)
    if resume_from is None:
        sys.exit("no checkpoint in %s" % out_dir)
    max_steps = int(resume_from.rsplit("-", 1)[1]) + 2  # two more steps
args = TrainingArguments(output_dir=out_dir, max_steps=max_steps, per_device_train_batch_size=8,
                         learning_rate=1e-2, save_strategy="no", logging_strategy="no", report_to=[],
                         use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, save_total_limit=2)
watchdog = WatchdogCallback()
trainer = Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[watchdog, Probe(watchdog)])
trainer.train(resume_from_checkpoint=resume_from)
