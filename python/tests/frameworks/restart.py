"""Shared by the scripts test_restart.py runs under ``watchdog run --restart``.

``restart_X.py WORKDIR`` trains a small model on random data on CPU for ``MAX_STEPS``
steps, resuming through the framework's helper (``latest_checkpoint``,
``resume_checkpoint``). Only the first attempt (``WATCHDOG_RESTART`` unset) leaks:
``LEAK_BYTES`` per step from step ``LEAK_FROM`` on, touched so that the cgroup's memory
grows; the watchdog asks for a checkpoint and the callback saves and acknowledges; then
four times as much per step until the kernel's OOM killer ends it. Every attempt appends what it did to
``WORKDIR/attempts.jsonl``, one JSON object a line: ``start`` (the environment and the
checkpoint the helper chose), ``resumed`` (the step the framework restored), ``step``
(the first step trained), ``saved`` (each save the watchdog asked for, after its
acknowledgment) and ``end``.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # python/: training_watchdog

ATTEMPT = int(os.environ.get("WATCHDOG_RESTART") or 0)
LEAK_BYTES = 24 << 20
LEAK_FROM = 5
STEP_SLEEP_S = 0.05  # per leaking step: the watchdog samples every 20 ms
MAX_STEPS = 150


class Record:
    """Appends this attempt's events to WORKDIR/attempts.jsonl (one write each, flushed)."""

    def __init__(self, workdir):
        self.path = os.path.join(workdir, "attempts.jsonl")
        self.first_step = None
        self.kept = []
        self.saved = False

    def write(self, event, **fields):
        self.saved = self.saved or event == "saved"
        line = json.dumps(dict(fields, event=event, attempt=ATTEMPT, pid=os.getpid())) + "\n"
        with open(self.path, "a") as f:
            f.write(line)

    def start(self, chosen):
        self.write("start", chosen=chosen, resume_from=os.environ.get("WATCHDOG_RESUME_FROM"),
                   last_verdict=os.environ.get("WATCHDOG_LAST_VERDICT"))

    def trained(self, step):
        """After each training step: the first is recorded; the first attempt leaks."""
        if self.first_step is None:
            self.first_step = step
            self.write("step", step=step)
        if ATTEMPT == 0 and step >= LEAK_FROM:
            if self.saved:
                # Saved and acknowledged: die soon, before the watchdog is armed again (about
                # 1 s after the alert) and asks for a second save the kill could cut short.
                self.kept.append(b"\x01" * (4 * LEAK_BYTES))
            else:
                self.kept.append(b"\x01" * LEAK_BYTES)
                time.sleep(STEP_SLEEP_S)
