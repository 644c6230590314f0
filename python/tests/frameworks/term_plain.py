"""A plain loop for test_on_term.py: term_plain.py WORKDIR ON_TERM [chain].

Trains (sleeps) step after step, writing WORKDIR/progress.json ({"pid", "step"}) at each;
with ON_TERM "save", install(on_term="save") and saves WORKDIR/ckpt-N.json when
checkpoint_requested() says so, then acknowledges (which ends the process on SIGTERM).
``chain``: a SIGTERM handler of the script's own, installed first, writes chained.json
and exits 7. Every save is appended to WORKDIR/saves.jsonl.
"""

import json
import os
import signal
import sys
import time

import common  # noqa: F401  (puts training_watchdog on sys.path)

import training_watchdog as tw

workdir, on_term = sys.argv[1], sys.argv[2]
chain = len(sys.argv) > 3 and sys.argv[3] == "chain"

if chain:
    def own(signum, frame):
        common.write_json(os.path.join(workdir, "chained.json"), {"signum": signum})
        sys.exit(7)

    signal.signal(signal.SIGTERM, own)

tw.install(on_term=None if on_term == "none" else on_term)
for step in range(1, 100000):
    time.sleep(0.05)  # the step
    common.write_json(os.path.join(workdir, "progress.json"), {"pid": os.getpid(), "step": step})
    if tw.checkpoint_requested():
        req = tw.request()
        path = os.path.join(workdir, "ckpt-%d.json" % step)
        common.write_json(path, {"step": step})
        with open(os.path.join(workdir, "saves.jsonl"), "a") as f:
            f.write(json.dumps({"step": step, "request": req}) + "\n")
        tw.acknowledge(path=path, step=step)
