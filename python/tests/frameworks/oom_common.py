"""Shared by the oom_*.py scripts that test_last_chance_frameworks.py runs.

Each trains a small model on random data on CPU. In ``oom`` mode a real
``torch.OutOfMemoryError`` (the class a CUDA OOM raises; it exists in CPU builds) is raised
inside training step ``FAIL_AT``, after ``failed.json`` records the step and the weights
then; the last-chance save of the framework saves, and the error ends the script (its type
is written to ``raised.json`` on the way out). In ``resume`` mode the script resumes with
the framework's own call and writes where it started to ``resumed.json``.
"""

import contextlib
import os
import sys
import time

import torch

from common import torch_digest, write_json  # noqa: F401  (common puts training_watchdog on sys.path)

FAIL_AT = 6
MESSAGE = "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 15.77 GiB total capacity)"


def fail(workdir, step, digest):
    """Record the state at the failure, then raise the OOM from inside the step."""
    write_json(os.path.join(workdir, "failed.json"), {"step": step, "digest": digest, "pid": os.getpid()})
    activations = torch.ones(1 << 20)  # held by this frame only: the last-chance save frees it  # noqa: F841
    raise torch.OutOfMemoryError(MESSAGE)


def wait_for_request(timeout=60.0):
    """With OOM_WAIT_REQUEST=1: wait (at most TIMEOUT s) until the watchdog has written a request."""
    import training_watchdog as tw

    deadline = time.monotonic() + timeout
    while os.environ.get("OOM_WAIT_REQUEST") == "1" and tw.request() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def resumed(workdir, step, digest):
    write_json(os.path.join(workdir, "resumed.json"), {"step": step, "digest": digest})


@contextlib.contextmanager
def reported(workdir, rank=0):
    """Writes the type of the error that ends the run to raised-RANK.json, and lets it go on."""
    try:
        yield
    except BaseException as e:
        write_json(os.path.join(workdir, "raised-%d.json" % rank),
                   {"type": "%s.%s" % (type(e).__module__, type(e).__qualname__), "message": str(e)[:500]})
        sys.stderr.flush()
        raise
