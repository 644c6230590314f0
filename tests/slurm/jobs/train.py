"""A plain training loop with the watchdog's client, as a user writes one for SLURM.

Each step sleeps STEP_S seconds (default 0.1) and, with LEAK_MIB set and no restart yet,
keeps LEAK_MIB MiB more. When the watchdog asks, it saves its step to ckpt-<tag><step>.json
(atomically) and acknowledges with the path and the step; it resumes from
WATCHDOG_RESUME_FROM when the watchdog names one. It stops making progress at STUCK_AT,
and finishes at STEPS. With ON_TERM=save, a SIGTERM that reaches it is saved for
(`install(on_term="save")`); with RESUME_FROM_RECORD set, a rerun by hand resumes from the
checkpoint record. Every line it prints is one a test reads.
"""

import json
import os
import sys
import time

import training_watchdog as tw
from training_watchdog import record

STEPS = int(os.environ.get("STEPS", "100000"))
STEP_S = float(os.environ.get("STEP_S", "0.1"))
STUCK_AT = int(os.environ.get("STUCK_AT", "0")) or None
LEAK_MIB = 0 if os.environ.get("WATCHDOG_RESTART") else int(os.environ.get("LEAK_MIB", "0"))
TAG = os.environ.get("CKPT_TAG", "")


def say(text):
    print("train[%s]: %s" % (os.environ.get("SLURM_PROCID", "-"), text), flush=True)


def save(step):
    path = "ckpt-%s%d.json" % (TAG, step)
    with open(path + ".tmp", "w") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    tw.acknowledge(path=path, step=step)
    say("saved step %d to %s" % (step, path))


def main():
    tw.install(on_term=os.environ.get("ON_TERM") or None)
    step = 0
    resume = os.environ.get("WATCHDOG_RESUME_FROM")
    if not resume and os.environ.get("RESUME_FROM_RECORD"):
        # A rerun by hand: the newest complete checkpoint of this run's key in the record.
        entry = record.newest_complete(os.getcwd())
        resume = entry.path if entry is not None else None
    if resume:
        with open(resume) as f:
            step = json.load(f)["step"]
    say("start at step %d (restart=%s, last verdict=%s, record=%s)" % (
        step + 1, os.environ.get("WATCHDOG_RESTART"), os.environ.get("WATCHDOG_LAST_VERDICT"),
        os.environ.get("WATCHDOG_CHECKPOINT_RECORD")))
    kept = []
    while step < STEPS:
        time.sleep(STEP_S)
        if STUCK_AT is None or step < STUCK_AT:
            step += 1
            if LEAK_MIB:
                kept.append(b"\x01" * (LEAK_MIB << 20))
            if step % 50 == 0:
                say("step %d" % step)
        if tw.checkpoint_requested():
            save(step)
    say("finished at step %d" % step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
