"""Lightning under ``watchdog run --restart``: restart_lightning.py WORKDIR (see restart.py)."""

import os
import sys

import restart  # puts training_watchdog on sys.path

import torch
import lightning.pytorch as pl

from lightning_model import Model
from training_watchdog.lightning import WatchdogCallback, latest_checkpoint

workdir = sys.argv[1]
ckpt_dir = os.path.join(workdir, "checkpoints")
record = restart.Record(workdir)


class Probe(pl.Callback):
    """After WatchdogCallback in the list: records what was restored, trained and saved."""

    def __init__(self, watchdog):
        self.watchdog, self.saves = watchdog, 0

    def on_train_start(self, trainer, pl_module):
        record.write("resumed", step=trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if len(self.watchdog.saved_steps) > self.saves:  # saved and acknowledged at this batch end
            self.saves = len(self.watchdog.saved_steps)
            record.write("saved", step=self.watchdog.saved_steps[-1], path=self.watchdog.last_path)
        record.trained(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        record.write("end", step=trainer.global_step)


torch.manual_seed(0)
chosen = latest_checkpoint(ckpt_dir)
record.start(chosen)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
watchdog = WatchdogCallback(dirpath=ckpt_dir)
trainer = pl.Trainer(max_steps=restart.MAX_STEPS, accelerator="cpu", callbacks=[watchdog, Probe(watchdog)],
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=workdir)
trainer.fit(Model(), loader, ckpt_path=chosen)
