"""Lightning DDP on two CPU ranks under torchrun (gloo): train_lightning_ranks.py WORKDIR.

As train_ranks.py, through the Lightning callback: each rank has its own request file,
rank 1 writes WORKDIR/rank1.progress, the test asks rank 1 only; the callback agrees
through the strategy. Each rank writes WORKDIR/rankN.json at the end of training.
"""

import os
import sys
import time

import common

import torch
import lightning.pytorch as pl

import training_watchdog as tw
from lightning_model import Model
from training_watchdog.lightning import WatchdogCallback

workdir = sys.argv[1]
rank = int(os.environ["RANK"])
os.environ["WATCHDOG_REQUEST_FILE"] = os.path.join(workdir, "request-rank%d.json" % rank)
os.environ["WATCHDOG_SIGNAL"] = "SIGUSR1"


class Probe(pl.Callback):
    """Before WatchdogCallback in the list: notes when this rank was asked, reports progress."""

    def __init__(self, watchdog):
        self.watchdog, self.asked_at = watchdog, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.asked_at is None and tw.checkpoint_requested():
            self.asked_at = trainer.global_step
        if rank == 1:
            common.write_json(os.path.join(workdir, "rank1.progress"), {"pid": os.getpid(), "step": trainer.global_step})
        time.sleep(0.01)

    def on_train_end(self, trainer, pl_module):
        common.write_json(os.path.join(workdir, "rank%d.json" % rank), {
            "saved_steps": self.watchdog.saved_steps, "asked_at": self.asked_at,
            "checkpoint": self.watchdog.last_path, "final_step": trainer.global_step,
            "every": self.watchdog.every, "world_size": trainer.world_size})


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
watchdog = WatchdogCallback(dirpath=os.path.join(workdir, "checkpoints"))
trainer = pl.Trainer(max_steps=200, accelerator="cpu", devices=2, strategy="ddp",
                     callbacks=[Probe(watchdog), watchdog], logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, default_root_dir=workdir)
trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
# Lightning leaves the gloo process group to the interpreter's exit, where its threads can
# abort a rank ("terminate called without an active exception", seen once in CI): it is
# ended here, on every rank, as train_ranks.py does.
if torch.distributed.is_available() and torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
