"""Writes `<request file>.steps` the way docs/recording.md says the client does, from a
scripted allocator, for the end-to-end tests of the step-peak path. Standard library
only, and no dependency on the Python client: the format is the contract.

Usage: steps_writer.py OUT SHAPE [options]

Each step sleeps --step-s, then reports allocated/reserved/peak/retries per SHAPE:
  leak     the peak grows --grow-mib every training step;
  eval     training steps flat, every --train-steps an evaluation of --eval-steps whose
           peak grows --grow-mib from one evaluation to the next;
  frag     flat peaks, allocation retries growing and reserved but unallocated memory
           growing every step;
  steady   flat peaks with a little noise;
  oom      steady, then a CUDA out-of-memory error at step --oom-at: the exception entry,
           an acknowledgment with cause cuda_oom, exit 1.
A step whose peak exceeds --capacity-mib is the failing step: the exception entry is
written and the script exits 1. A request in the request file ends it with an
acknowledgment and exit 0. OUT receives one JSON object: what happened and at which step.
"""
import argparse
import json
import os
import signal
import sys
import time

MIB = 1 << 20

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("shape", choices=["leak", "eval", "frag", "steady", "oom"])
p.add_argument("--pidfile")
p.add_argument("--capacity-mib", type=float, default=1 << 20)
p.add_argument("--base-mib", type=float, default=2048)
p.add_argument("--grow-mib", type=float, default=8)
p.add_argument("--step-s", type=float, default=0.02)
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--train-steps", type=int, default=50)
p.add_argument("--eval-steps", type=int, default=10)
p.add_argument("--oom-at", type=int, default=50)
p.add_argument("--uuid", default=None)
p.add_argument("--index", type=int, default=0)
p.add_argument("--writer-pid", type=int, default=None, help="the pid written in the file")
p.add_argument("--symlink", action="store_true", help="make .steps a symlink to the real file")
p.add_argument("--oversize", action="store_true", help="pad the file past 128 KiB")
p.add_argument("--service-dir", help="the service's request directory of this user: the "
               "request file is DIR/<pid>.request.json (a run the daemon found)")
p.add_argument("--tag", help="ignored: makes the command line unique for a daemon's rule")
args = p.parse_args()

if args.service_dir:
    request_file = os.path.join(args.service_dir, "%d.request.json" % os.getpid())
else:
    request_file = os.environ["WATCHDOG_REQUEST_FILE"]
interval = float(os.environ.get("WATCHDOG_INTERVAL", "0.1"))
steps_path = request_file + ".steps"
device = {"index": args.index}
if args.uuid:
    device["uuid"] = args.uuid

# A training process catches the checkpoint signal; this one reads the request file.
signal.signal(signal.SIGUSR1, lambda *_: None)

if args.pidfile:
    with open(args.pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(args.pidfile + ".tmp", args.pidfile)


def finish(what, step, code, **more):
    with open(args.out + ".tmp", "w") as f:
        json.dump(dict(what=what, step=step, **more), f)
    os.replace(args.out + ".tmp", args.out)
    sys.exit(code)


pending = []
written_upto = 0
last_write = 0.0


def write(exception=None):
    """Every entry since the watchdog's last read (it removes the file once read)."""
    global pending, written_upto, last_write
    if written_upto and not os.path.lexists(steps_path):
        pending = [e for e in pending if e["n"] > written_upto]
    doc = {"pid": args.writer_pid or os.getpid(), "device": device, "steps": pending[-256:]}
    if exception:
        doc["exception"] = exception
    text = json.dumps(doc)
    if args.oversize:
        text += " " * (129 * 1024)
    target = steps_path + ".real" if args.symlink else steps_path
    tmp = target + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileNotFoundError:
        return  # the service has not made the user's directory yet

    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, target)
    if args.symlink and not os.path.lexists(steps_path):
        os.symlink(target, steps_path)
    if pending:
        written_upto = pending[-1]["n"]
    last_write = time.monotonic()


def requested():
    try:
        with open(request_file) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def figures(i):
    """(phase, pass, allocated, reserved, peak, retries) of step i, in bytes."""
    base = args.base_mib * MIB
    if args.shape == "leak":
        peak = base + i * args.grow_mib * MIB
        return "train", 1, peak * 0.8, peak, peak, 0
    if args.shape == "eval":
        cycle = args.train_steps + args.eval_steps
        k, j = divmod(i, cycle)
        if j < args.train_steps:
            return "train", 1, base * 0.8, base, base, 0
        peak = base + (k + 1) * args.grow_mib * MIB
        return "eval", k + 1, base * 0.8, max(base, peak), peak, 0
    if args.shape == "frag":
        gap = i * args.grow_mib * MIB
        return "train", 1, base * 0.8, base + gap, base, i // 5
    peak = base + (i % 3) * MIB
    return "train", 1, base * 0.8, peak, peak, 0


n = 0
previous = time.monotonic()
for i in range(args.steps):
    time.sleep(args.step_s)
    req = requested()
    if req is not None:
        with open(request_file + ".ack.tmp", "w") as f:
            json.dump({"seq": req["seq"], "time_unix": time.time(), "step": i}, f)
        os.replace(request_file + ".ack.tmp", request_file + ".ack")
        finish("request", i, 0, reason=req.get("reason"), request_step=req.get("step"))
    phase, pass_, allocated, reserved, peak, retries = figures(i)
    if args.shape == "oom" and i == args.oom_at:
        peak = args.capacity_mib * MIB + 1
    if peak > args.capacity_mib * MIB:
        exception = {
            "kind": "cuda_oom", "step": i, "phase": phase, "time_unix": time.time(),
            "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
            "allocated": int(allocated), "reserved": int(reserved), "peak": int(peak),
        }
        write(exception)
        with open(request_file + ".ack.tmp", "w") as f:
            json.dump({"seq": 0, "time_unix": time.time(), "path": "ckpt/last-chance",
                       "step": i - 1, "cause": "cuda_oom"}, f)
        os.replace(request_file + ".ack.tmp", request_file + ".ack")
        finish("oom", i, 1)
    now = time.monotonic()
    n += 1
    pending.append({
        "n": n, "step": i, "phase": phase, "pass": pass_, "time_unix": time.time(),
        "duration_s": now - previous, "allocated": int(allocated), "reserved": int(reserved),
        "peak": int(peak), "retries": retries, "ooms": 0, "folded": 1,
    })
    previous = now
    if now - last_write >= interval:
        write()
finish("done", args.steps, 0)
