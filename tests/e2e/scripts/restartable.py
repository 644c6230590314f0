"""A training loop without a framework for `watchdog run --restart` tests.

It counts global steps, saves a checkpoint (a directory holding the step) every
--save-every steps and when the watchdog asks (SIGUSR1), acknowledges each save by writing
`<request file>.ack` with its path and step, and resumes from WATCHDOG_RESUME_FROM. One
JSON line per attempt goes to the log: what the attempt was told and where it started.

Failures, each chosen by a flag:
  --leak-mib M --leak-in first|all   leak M MiB per step (only in the first attempt, or in each)
  --spike-at S --spike-mib M         allocate M MiB at global step S, in every attempt
  --die-mid-save-at S                first attempt: start writing the checkpoint of step S,
                                     then SIGKILL itself halfway through the save
  --fill DIR                         first attempt: after the first save, write DIR/ballast
                                     until the disk is full, then exit 1
  --leave-child                      first attempt: start `sleep 600`, which outlives it
  --rewrite-at S                     first attempt: at step S, rewrite the last acknowledged
                                     checkpoint in place, then SIGKILL itself halfway through
"""

import argparse
import json
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("log")
p.add_argument("ckpt_dir")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--step-s", type=float, default=0.05)
p.add_argument("--save-every", type=int, default=5)
p.add_argument("--save-bytes", type=int, default=1024)
p.add_argument("--leak-mib", type=int, default=0)
p.add_argument("--leak-in", choices=["first", "all"], default="first")
p.add_argument("--spike-at", type=int, default=-1)
p.add_argument("--spike-mib", type=int, default=0)
p.add_argument("--die-mid-save-at", type=int, default=-1)
p.add_argument("--fill", default=None)
p.add_argument("--leave-child", action="store_true", help="first attempt: start a child that outlives it")
p.add_argument("--rewrite-at", type=int, default=-1)
a = p.parse_args()

# The kernel's OOM killer picks this process, not the watchdog sharing its cgroup.
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
except OSError:
    pass

restart = os.environ.get("WATCHDOG_RESTART")
first = restart is None
resume = os.environ.get("WATCHDOG_RESUME_FROM")
start = 0
if resume:
    with open(os.path.join(resume, "state.json")) as f:
        start = json.load(f)["step"]
request_file = os.environ.get("WATCHDOG_REQUEST_FILE")
asked = False


def on_usr1(_sig, _frame):
    global asked
    asked = True


signal.signal(signal.SIGUSR1, on_usr1)


def log(**fields):
    with open(a.log, "a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()


child = None
if a.leave_child and first:
    import subprocess

    child = subprocess.Popen(["sleep", "600"]).pid

log(
    event="start",
    child=child,
    restart=restart,
    last_verdict=os.environ.get("WATCHDOG_LAST_VERDICT"),
    resume_from=resume,
    first_step=start + 1,
)


def save(step, die_halfway=False):
    path = os.path.join(a.ckpt_dir, "ckpt-%d" % step)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "weights"), "wb") as f:
        f.write(b"w" * a.save_bytes)
        f.flush()
        os.fsync(f.fileno())
    if die_halfway:
        os.kill(os.getpid(), signal.SIGKILL)
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump({"step": step}, f)
    seq = 0
    if request_file:
        try:
            with open(request_file) as f:
                seq = json.load(f).get("seq", 0)
        except (OSError, ValueError):
            pass
        ack = {"seq": seq, "time_unix": time.time(), "path": path, "step": step}
        tmp = request_file + ".ack.tmp"
        with open(tmp, "w") as f:
            json.dump(ack, f)
        os.rename(tmp, request_file + ".ack")
    log(event="saved", step=step, path=path)
    return path


held = []
last_saved = None
for step in range(start + 1, a.steps + 1):
    time.sleep(a.step_s)
    if a.leak_mib and (first or a.leak_in == "all"):
        held.append(b"\x01" * (a.leak_mib << 20))
    if step == a.spike_at:
        held.append(b"\x01" * (a.spike_mib << 20))
    if step == a.die_mid_save_at and first:
        save(step, die_halfway=True)
    if step == a.rewrite_at and first and last_saved:
        with open(os.path.join(last_saved, "weights"), "wb") as f:
            f.write(b"w" * (a.save_bytes // 2))
        os.kill(os.getpid(), signal.SIGKILL)
    if step % a.save_every == 0 or asked:
        asked = False
        last_saved = save(step)
        if a.fill and first:
            try:
                with open(os.path.join(a.fill, "ballast"), "wb") as f:
                    while True:
                        f.write(b"b" * 65536)
                        f.flush()
                        time.sleep(0.002)
            except OSError as e:
                log(event="full", error=str(e))
                time.sleep(0.3)
                sys.exit(1)
log(event="done", step=a.steps)
