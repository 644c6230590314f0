"""Lightning with on_term="save": term_lightning.py run|val|resume WORKDIR (see test_on_term.py).

``run``: trains, writing WORKDIR/progress.json ({"pid", "step"}) at each batch end; the test
sends SIGTERM. ``val``: the first validation batch after step 5 sends SIGTERM to this process
(Lightning raises SIGTERMException at that validation batch end: the save is on_exception's).
``resume``: resumes from latest_checkpoint(WORKDIR/checkpoints), writes resumed.json, trains
two more steps.
"""

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


class ValModel(Model):
    def validation_step(self, batch, batch_idx):
        if mode == "val" and batch_idx == 0 and self.trainer.global_step >= 5:
            os.kill(os.getpid(), signal.SIGTERM)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)


class Probe(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        if mode == "resume":
            common.write_json(os.path.join(workdir, "resumed.json"), {
                "step": trainer.global_step, "digest": common.torch_digest(pl_module)})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        common.write_json(os.path.join(workdir, "progress.json"), {"pid": os.getpid(), "step": trainer.global_step})
        if mode != "resume":
            time.sleep(0.05)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randn(32, 1)), batch_size=8)
watchdog = WatchdogCallback(dirpath=ckpt_dir, on_term="save")
ckpt, max_steps = None, 100000
if mode == "resume":
    ckpt = latest_checkpoint(ckpt_dir)
    if ckpt is None:
        sys.exit("no checkpoint in %s" % ckpt_dir)
    max_steps = torch.load(ckpt, weights_only=False)["global_step"] + 2
trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", callbacks=[watchdog, Probe()],
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=workdir,
                     val_check_interval=8 if mode == "val" else None, num_sanity_val_steps=0,
                     limit_val_batches=4 if mode == "val" else 0)
trainer.fit(ValModel(), loader, val if mode == "val" else None, ckpt_path=ckpt)
