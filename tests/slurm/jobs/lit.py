"""A Lightning run as its users run it on SLURM: SLURMEnvironment(auto_requeue=True), the
watchdog's callback, and a resume from the newest checkpoint on a requeue."""

import os
import time

import torch
import lightning as L
from lightning.pytorch.plugins.environments import SLURMEnvironment

from training_watchdog.lightning import WatchdogCallback, latest_checkpoint

MAX_STEPS = int(os.environ.get("MAX_STEPS", "300"))


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.global_step % 20 == 0:
            print("lit: step %d (restarts=%s)" % (self.global_step, os.environ.get("SLURM_RESTART_COUNT", "0")), flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer = L.Trainer(max_steps=MAX_STEPS, callbacks=[WatchdogCallback(dirpath="ckpt")],
                        plugins=[SLURMEnvironment(auto_requeue=True)], accelerator="cpu",
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=os.getcwd())
    trainer.fit(Tiny(), loader, ckpt_path=latest_checkpoint("ckpt"))
    print("lit: finished at step %d" % trainer.global_step, flush=True)


if __name__ == "__main__":
    main()
