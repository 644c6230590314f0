"""A training-like process for the end-to-end tests.

It grows memory (or writes checkpoint files, or just waits) in steps, uses the
training_watchdog client the way a training loop would, and writes what it saw to a
JSON report file so the test can check the order of events.

Usage: hog.py REPORT MODE [options]  (see the argparse help)
"""
import argparse
import errno
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import training_watchdog  # noqa: E402
from e2e_report import Report  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("report")
p.add_argument("mode", choices=["leak", "sawtooth", "write", "wait"])
p.add_argument("--step-mib", type=float, default=4)
p.add_argument("--every", type=float, default=0.05, help="seconds between steps")
p.add_argument("--max-mib", type=float, default=1 << 20)
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--dir", default=".")
p.add_argument("--no-handler", action="store_true")
p.add_argument("--stop-after-checkpoint", action="store_true")
p.add_argument("--pidfile", help="write this process's PID here (for the fake NVML script)")
p.add_argument("--exit-code", type=int, default=0, help="exit with this status at the end")
args = p.parse_args()

start = time.time()
if args.pidfile:
    with open(args.pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(args.pidfile + ".tmp", args.pidfile)
note = Report(args.report, start).note


if not args.no_handler:
    training_watchdog.install()
note("started")

chunks = []
held = 0.0
n = 0
saved = False
deadline = start + args.seconds
while time.time() < deadline:
    if not args.no_handler and training_watchdog.checkpoint_requested():
        req = training_watchdog.request() or {}
        path = os.path.join(args.dir, "checkpoint-%d.pkl" % os.getpid())
        with open(path + ".tmp", "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        training_watchdog.acknowledge()
        note("checkpoint", resource=req.get("resource"), held_mib=held, path=path)
        saved = True
        if args.stop_after_checkpoint:
            break
    if args.mode == "leak" and held < args.max_mib:
        b = bytearray(int(args.step_mib * 1024 * 1024))
        for i in range(0, len(b), 4096):
            b[i] = 1
        chunks.append(b)
        held += args.step_mib
    elif args.mode == "sawtooth":
        if held < args.max_mib:
            b = bytearray(int(args.step_mib * 1024 * 1024))
            for i in range(0, len(b), 4096):
                b[i] = 1
            chunks.append(b)
            held += args.step_mib
        else:
            chunks.clear()
            held = 0.0
    elif args.mode == "write":
        path = os.path.join(args.dir, "ckpt-%05d.bin" % n)
        try:
            with open(path, "wb") as f:
                for _ in range(int(args.step_mib)):
                    f.write(b"\0" * (1024 * 1024))
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            if e.errno == errno.ENOSPC:
                note("enospc", files=n)
                sys.exit("checkpoint writer: %s" % e)  # a training script dies here
            raise
        n += 1
    time.sleep(args.every)
note("done", held_mib=held, saved=saved)
sys.exit(args.exit_code)
