"""Lightning's last-chance save: oom_lightning.py oom|resume|ranks WORKDIR (see oom_common.py).

``oom``: ``training_step`` raises a real ``torch.OutOfMemoryError`` at global step
``FAIL_AT``; WatchdogCallback.on_exception saves ``watchdog-step=N.ckpt``. ``resume``:
``fit(ckpt_path=latest_checkpoint(...))``, recording where it starts. ``ranks``: DDP on two
CPU ranks under torchrun (gloo), only rank 1 fails; each rank's request file is its own.
"""

import os
import sys

import oom_common as oc

import torch
import lightning.pytorch as pl

from lightning_model import Model
from training_watchdog.lightning import WatchdogCallback, latest_checkpoint

mode, workdir = sys.argv[1], sys.argv[2]
ckpt_dir = os.path.join(workdir, "checkpoints")
rank = int(os.environ.get("RANK", "0"))
if mode in ("ranks", "zero"):
    os.environ["WATCHDOG_REQUEST_FILE"] = os.path.join(workdir, "request-rank%d.json" % rank)


class Failing(Model):
    def training_step(self, batch, batch_idx):
        if mode != "resume" and rank == (0 if mode == "oom" else 1) and self.trainer.global_step == oc.FAIL_AT:
            oc.fail(workdir, self.trainer.global_step, oc.torch_digest(self))
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        if mode == "zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return ZeroRedundancyOptimizer(self.parameters(), optimizer_class=torch.optim.Adam, lr=self.lr)
        return super().configure_optimizers()


class Probe(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        if mode == "resume":
            oc.resumed(workdir, trainer.global_step, oc.torch_digest(pl_module))


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
ckpt = latest_checkpoint(ckpt_dir) if mode == "resume" else None
if mode == "resume" and ckpt is None:
    sys.exit("no watchdog checkpoint in %s" % ckpt_dir)
ranks = dict(devices=2, strategy="ddp") if mode in ("ranks", "zero") else {}
trainer = pl.Trainer(max_steps=oc.FAIL_AT + 2, accelerator="cpu", callbacks=[WatchdogCallback(dirpath=ckpt_dir), Probe()],
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=workdir, **ranks)
with oc.reported(workdir, rank):
    trainer.fit(Failing(), loader, ckpt_path=ckpt)
