"""Hugging Face Trainer with on_term="save": term_transformers.py run|resume WORKDIR (see test_on_term.py)."""

import os
import sys
import time

import common  # noqa: F401  (puts training_watchdog on sys.path)

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from tiny_transformers import Data, Model
from training_watchdog.transformers import WatchdogCallback, resume_checkpoint

mode, workdir = sys.argv[1], sys.argv[2]
out_dir = os.path.join(workdir, "out")


class Probe(TrainerCallback):
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if mode == "resume":
            common.write_json(os.path.join(workdir, "resumed.json"), {
                "step": state.global_step, "digest": common.torch_digest(model)})

    def on_step_end(self, args, state, control, **kwargs):
        common.write_json(os.path.join(workdir, "progress.json"), {"pid": os.getpid(), "step": state.global_step})
        if mode != "resume":
            time.sleep(0.05)

    def on_save(self, args, state, control, model=None, **kwargs):
        # after WatchdogCallback.on_save: the end waits until every callback's on_save ran
        common.write_json(os.path.join(workdir, "on_save.json"), {
            "step": state.global_step, "digest": common.torch_digest(model)})


torch.manual_seed(0)
resume_from, max_steps = None, 100000
if mode == "resume":
    resume_from = resume_checkpoint(out_dir)
    if resume_from is None:
        sys.exit("no checkpoint in %s" % out_dir)
    max_steps = int(resume_from.rsplit("-", 1)[1]) + 2
args = TrainingArguments(output_dir=out_dir, max_steps=max_steps, per_device_train_batch_size=8,
                         learning_rate=1e-2, save_strategy="no", logging_strategy="no", report_to=[],
                         use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, save_total_limit=2)
trainer = Trainer(model=Model(), args=args, train_dataset=Data(),
                  callbacks=[WatchdogCallback(on_term="save"), Probe()])
trainer.train(resume_from_checkpoint=resume_from)
