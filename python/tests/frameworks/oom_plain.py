"""A plain PyTorch loop's last-chance save: oom_plain.py oom|resume WORKDIR (see oom_common.py).

``oom``: the model's forward raises a real ``torch.OutOfMemoryError`` at step ``FAIL_AT``
inside ``training_watchdog.last_chance(save)``; ``save(step)`` writes ``ckpt-STEP.pt``.
With ``OOM_WAIT_REQUEST=1`` the failing step waits for a request from the watchdog first.
``resume``: loads the newest ``ckpt-*.pt`` and records the step and weights it starts with.
"""

import glob
import os
import sys

import oom_common as oc

import torch

import training_watchdog as tw

mode, workdir = sys.argv[1], sys.argv[2]


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.step = 0

    def forward(self, x):
        if mode == "oom" and self.step == oc.FAIL_AT:
            oc.wait_for_request()
            oc.fail(workdir, self.step, oc.torch_digest(self))
        return self.net(x)


torch.manual_seed(0)
model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
start = 0
if mode == "resume":
    newest = max(glob.glob(os.path.join(workdir, "ckpt-*.pt")), key=os.path.getmtime)
    state = torch.load(newest)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    oc.resumed(workdir, start, oc.torch_digest(model))


def save(step):
    path = os.path.join(workdir, "ckpt-%d.pt" % step)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
    return path


x, y = torch.randn(64, 16), torch.randn(64, 1)
with oc.reported(workdir):
    with tw.last_chance(save) as run:
        for step in range(start, oc.FAIL_AT + 2):
            run.step = model.step = step  # the steps done so far: a save now resumes here
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
