"""Two ranks under torchrun (gloo): train_ranks.py WORKDIR.

Each rank has its own request file (WORKDIR/request-rankN.json), as ranks on different
nodes have different watchdogs. Rank 1 writes its PID and step to WORKDIR/rank1.progress;
the test writes a request for rank 1 only and signals it. Both ranks go through
Agreement.requested(step) at every step and save when it says so; they train
AFTER_SAVE more steps and write WORKDIR/rankN.json.
"""

import datetime
import os
import sys
import time

import common

import torch
import torch.distributed as dist

import training_watchdog as tw
from training_watchdog.distributed import Agreement

MAX_STEPS = 3000
AFTER_SAVE = 15

workdir = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
os.environ["WATCHDOG_REQUEST_FILE"] = os.path.join(workdir, "request-rank%d.json" % rank)
os.environ["WATCHDOG_SIGNAL"] = "SIGUSR1"
tw.install()

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
agreement = Agreement()
saved_steps, asked_at, checkpoint, stop_at = [], None, None, MAX_STEPS
step = 0
while step < stop_at:
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()  # DDP: an all-reduce of gradients
    opt.step()
    if asked_at is None and tw.checkpoint_requested():
        asked_at = step
    if agreement.requested(step):
        checkpoint = os.path.join(workdir, "ckpt-rank%d-step%d.pt" % (rank, step))
        torch.save({"step": step, "model": model.module.state_dict()}, checkpoint)
        dist.barrier()  # a collective right after the save, as a sharded save has
        saved_steps.append(step)
        agreement.acknowledge()
        stop_at = step + AFTER_SAVE
    if rank == 1:
        common.write_json(os.path.join(workdir, "rank1.progress"), {"pid": os.getpid(), "step": step})
    time.sleep(0.01)
    step += 1

common.write_json(os.path.join(workdir, "rank%d.json" % rank), {
    "saved_steps": saved_steps, "asked_at": asked_at, "checkpoint": checkpoint,
    "final_step": step - 1, "every": agreement.every})
dist.destroy_process_group()
