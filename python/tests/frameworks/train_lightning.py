"""Lightning: train_lightning.py leak|resume|slurm WORKDIR (see common.py).

``slurm``: as ``leak``, run with SLURM variables (Lightning's auto-requeue on) and a fake
``scontrol`` that writes $SCONTROL_MARKER. After the watchdog's checkpoint, the script
sends itself SIGUSR1 with no request pending, as SLURM does before the time limit, and
writes WORKDIR/slurm.json: whether scontrol ran before and after, and the HPC checkpoints.
"""

import glob
import os
import signal
import sys
import time

import common  # noqa: F401  (puts training_watchdog on sys.path)

import torch
import lightning.pytorch as pl

from lightning_model import Model
from training_watchdog.lightning import WatchdogCallback, latest_checkpoint

mode, workdir = sys.argv[1], sys.argv[2]
ckpt_dir = os.path.join(workdir, "checkpoints")


class Probe(pl.Callback):
    """After WatchdogCallback in the list: leaks, notices the save, records the state."""

    def __init__(self, watchdog):
        self.watchdog, self.leak = watchdog, common.Leak()

    def on_train_start(self, trainer, pl_module):
        if mode == "resume":
            common.write_json(os.path.join(workdir, "resumed.json"), {
                "step": trainer.global_step, "epoch": trainer.current_epoch,
                "digest": common.torch_digest(pl_module)})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if mode == "resume":
            return
        if mode == "slurm" and self.leak.saved_at is not None:
            self.slurm_time_limit(trainer)
        if self.leak.saved_at is None and self.watchdog.saved_steps:
            self.leak.saved_at = trainer.global_step
            self.leak.saved(workdir, {"step": self.watchdog.saved_steps[-1],
                                      "path": self.watchdog.last_path,
                                      "digest": common.torch_digest(pl_module)})
        self.leak.step(trainer.global_step)
        self.leak.maybe_die()
        time.sleep(0.02)

    def slurm_time_limit(self, trainer):
        marker = os.environ["SCONTROL_MARKER"]
        if self.leak.after == 1:
            self.slurm = {"requeued_by_the_watchdog": os.path.exists(marker),
                          "hpc_by_the_watchdog": glob.glob(os.path.join(workdir, "hpc_ckpt_*.ckpt")),
                          "handler": getattr(signal.getsignal(signal.SIGUSR1), "__qualname__", None)}
            os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's --signal=USR1@90, no request pending
        elif self.leak.after == common.STEPS_AFTER_SAVE:
            self.slurm["requeued_by_slurm"] = os.path.exists(marker)
            self.slurm["hpc_by_slurm"] = glob.glob(os.path.join(workdir, "hpc_ckpt_*.ckpt"))
            common.write_json(os.path.join(workdir, "slurm.json"), self.slurm)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
watchdog = WatchdogCallback(dirpath=ckpt_dir)
ckpt, max_steps = None, 100000
if mode == "resume":
    ckpt = latest_checkpoint(ckpt_dir)
    if ckpt is None:
        sys.exit("no watchdog checkpoint in %s" % ckpt_dir)
    max_steps = torch.load(ckpt, weights_only=False)["global_step"] + 2  # two more steps
trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", callbacks=[watchdog, Probe(watchdog)],
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=workdir)
trainer.fit(Model(), loader, ckpt_path=ckpt)
