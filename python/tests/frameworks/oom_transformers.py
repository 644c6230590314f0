"""Transformers' last-chance save: oom_transformers.py oom|resume|ranks WORKDIR (see oom_common.py).

``oom``: the model's forward raises a real ``torch.OutOfMemoryError`` in training step
``FAIL_AT``, inside ``training_watchdog.transformers.last_chance(trainer)``, which saves
``checkpoint-N``. ``resume``: ``train(resume_from_checkpoint=...)``, recording where it
starts. ``ranks``: DDP on two CPU ranks under torchrun (gloo), only rank 1 fails.
"""

import os
import sys

import oom_common as oc

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import tiny_transformers
from tiny_transformers import Data
from transformers.trainer_utils import get_last_checkpoint

import training_watchdog.transformers as twt

mode, workdir = sys.argv[1], sys.argv[2]
out_dir = os.path.join(workdir, "out")
rank = int(os.environ.get("RANK", "0"))
if mode == "ranks":
    os.environ["WATCHDOG_REQUEST_FILE"] = os.path.join(workdir, "request-rank%d.json" % rank)


class Model(tiny_transformers.Model):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, labels=None):
        if self.training:
            if mode != "resume" and rank == (1 if mode == "ranks" else 0) and self.calls == oc.FAIL_AT:
                oc.fail(workdir, self.calls, oc.torch_digest(self))
            self.calls += 1
        return super().forward(x, labels)


class Probe(TrainerCallback):
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if mode == "resume":
            oc.resumed(workdir, state.global_step, oc.torch_digest(model))


torch.manual_seed(0)
resume_from = get_last_checkpoint(out_dir) if mode == "resume" else None
if mode == "resume" and resume_from is None:
    sys.exit("no checkpoint in %s" % out_dir)
args = TrainingArguments(output_dir=out_dir, max_steps=oc.FAIL_AT + 2, per_device_train_batch_size=8,
                         learning_rate=1e-2, save_strategy="no", logging_strategy="no", report_to=[],
                         use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
trainer = Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[twt.WatchdogCallback(), Probe()])
with oc.reported(workdir, rank):
    with twt.last_chance(trainer):
        trainer.train(resume_from_checkpoint=resume_from)
