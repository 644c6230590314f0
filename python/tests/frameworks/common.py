"""Shared by the training scripts that test_frameworks.py runs under the watchdog.

Each script trains a small model on random data on CPU. In ``leak`` mode it leaks
``LEAK_BYTES`` per step from step ``LEAK_FROM`` on (memory the process touches, so its RSS
grows) until the watchdog asks for a checkpoint and the callback has saved; it then writes
what it saved to ``result.json``, trains a few more steps and dies with status
``DIED`` (as the run would when the memory ran out). In ``resume`` mode it resumes from
the checkpoint and writes what it restored to ``resumed.json`` before its first step.
"""

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # python/: training_watchdog

LEAK_BYTES = 24 << 20
LEAK_FROM = 5
STEPS_AFTER_SAVE = 3
DIED = 17


def rss_bytes():
    """This process's resident set size (VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def digest(arrays):
    """sha256 of the bytes of a sequence of numpy arrays (weights), in order."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


def torch_digest(module):
    return digest([t.detach().cpu().numpy() for t in module.state_dict().values()])


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


class Leak:
    """Memory kept on purpose; ``step(n)`` leaks once per training step from LEAK_FROM on."""

    def __init__(self, steps_after_save=STEPS_AFTER_SAVE):
        self.steps_after_save = steps_after_save
        self.kept = []
        self.saved_at = None  # the step at which the callback's save was seen
        self.after = 0

    def step(self, n):
        if self.saved_at is None and n >= LEAK_FROM:
            self.kept.append(b"\x01" * LEAK_BYTES)

    def saved(self, workdir, record):
        """Called once the callback saved: write result.json with ``record`` and this RSS."""
        import training_watchdog as tw

        record = dict(record, rss_bytes=rss_bytes(), request=tw.request(), pid=os.getpid())
        write_json(os.path.join(workdir, "result.json"), record)

    def maybe_die(self):
        """After the save, a few more steps, then die as an out-of-memory run would."""
        if self.saved_at is not None:
            self.after += 1
            if self.after > self.steps_after_save:
                sys.stdout.flush()
                os._exit(DIED)
