"""Hugging Face Trainer under ``watchdog run --restart``: restart_transformers.py WORKDIR (see restart.py)."""

import os
import sys

import restart  # puts training_watchdog on sys.path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from tiny_transformers import Data, Model

from training_watchdog.transformers import WatchdogCallback, resume_checkpoint

workdir = sys.argv[1]
out_dir = os.path.join(workdir, "out")
record = restart.Record(workdir)


class Probe(TrainerCallback):
    """After WatchdogCallback: records what was restored, trained and saved."""

    def __init__(self, watchdog):
        self.watchdog, self.saves = watchdog, 0

    def on_train_begin(self, args, state, control, **kwargs):
        record.write("resumed", step=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        record.trained(state.global_step)

    def on_save(self, args, state, control, **kwargs):
        # after WatchdogCallback.on_save: saved and acknowledged
        if len(self.watchdog.saved_steps) > self.saves:
            self.saves = len(self.watchdog.saved_steps)
            record.write("saved", step=state.global_step,
                         path=os.path.join(out_dir, "checkpoint-%d" % state.global_step))

    def on_train_end(self, args, state, control, **kwargs):
        record.write("end", step=state.global_step)


torch.manual_seed(0)
chosen = resume_checkpoint(out_dir)
record.start(chosen)
args = TrainingArguments(output_dir=out_dir, max_steps=restart.MAX_STEPS, per_device_train_batch_size=8,
                         learning_rate=1e-2, save_strategy="no", logging_strategy="no", report_to=[],
                         use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, save_total_limit=2)
watchdog = WatchdogCallback()
trainer = Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[watchdog, Probe(watchdog)])
trainer.train(resume_from_checkpoint=chosen)
