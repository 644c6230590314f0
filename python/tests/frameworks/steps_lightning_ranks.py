"""Lightning DDP on two CPU ranks (gloo) with validation: steps_lightning_ranks.py WORKDIR.

Each rank has its own request file and the fake allocator (fake_allocator.py) installed;
rank 1 asks itself at the last training batch of the first epoch, after the callback
looked (step 4, not a multiple of ``every``). The save then comes at the start of the
validation, on both ranks at once (one collective there), before the first validation
batch. Each rank writes WORKDIR/rankN.json at the end.
"""

import json
import os
import sys
import time

import common

import torch
import lightning.pytorch as pl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/tests: fake_allocator
from fake_allocator import FakeAllocator  # noqa: E402
from training_watchdog.lightning import WatchdogCallback  # noqa: E402

workdir = sys.argv[1]
rank = int(os.environ["RANK"])
request = os.path.join(workdir, "request-rank%d.json" % rank)
os.environ["WATCHDOG_REQUEST_FILE"] = request
os.environ["WATCHDOG_INTERVAL"] = "0"
fake = FakeAllocator("eval_growth").install()


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        fake.step("train")
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def validation_step(self, batch, i):
        fake.step("eval")
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Probe(pl.Callback):
    """After WatchdogCallback in the list."""

    def __init__(self, watchdog):
        self.watchdog, self.saved_at_first_eval_batch = watchdog, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if rank == 1 and trainer.current_epoch == 0 and batch_idx == 3:
            common.write_json(request, {"seq": 1, "time_unix": time.time(), "resource": "gpu0",
                                        "reason": "eval_peak"})

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and self.saved_at_first_eval_batch is None:
            self.saved_at_first_eval_batch = list(self.watchdog.saved_steps)

    def on_train_end(self, trainer, pl_module):
        common.write_json(os.path.join(workdir, "rank%d.json" % rank), {
            "saved_steps": self.watchdog.saved_steps, "checkpoint": self.watchdog.last_path,
            "saved_at_first_eval_batch": self.saved_at_first_eval_batch,
            "final_step": trainer.global_step, "world_size": trainer.world_size})


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
watchdog = WatchdogCallback(dirpath=os.path.join(workdir, "checkpoints"))
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp",
                     callbacks=[watchdog, Probe(watchdog)], logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, default_root_dir=workdir,
                     num_sanity_val_steps=0)
trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8),
            torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(32)), batch_size=8))
# Lightning leaves the gloo process group to the interpreter's exit, where its threads can
# abort a rank ("terminate called without an active exception", seen once in CI): it is
# ended here, on every rank, as train_ranks.py does.
if torch.distributed.is_available() and torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
with open("%s.steps.%d" % (request, os.getpid())) as f:
    json.load(f)  # readable at the end (one rank of two: its own file)
