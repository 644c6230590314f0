"""A training loop that saves when the watchdog asks: SAVE_S seconds to save (or never,
with NEVER_ACK set), acknowledged with the path and the step, then exits 0 with
EXIT_AFTER_SAVE set. It resumes from the newest
complete checkpoint of the watchdog's record (training_watchdog.record), as a run started
again on another machine would, and says each thing it does on stdout."""

import json
import os
import sys
import time

import training_watchdog as tw
from training_watchdog import record

tw.install()
step = 0
entry = record.newest_complete(os.getcwd())
if entry is not None:
    with open(entry.path) as f:
        step = json.load(f)["step"]
print("start at step %d" % (step + 1), flush=True)
while True:
    step += 1
    time.sleep(0.05)
    if tw.checkpoint_requested() and not os.environ.get("NEVER_ACK"):
        time.sleep(float(os.environ.get("SAVE_S", "0.2")))
        path = "ckpt-%d.json" % step
        with open(path, "w") as f:
            json.dump({"step": step}, f)
        tw.acknowledge(path=path, step=step)
        print("saved step %d" % step, flush=True)
        if os.environ.get("EXIT_AFTER_SAVE"):
            sys.exit(0)
    if step >= 100000:
        sys.exit(0)
