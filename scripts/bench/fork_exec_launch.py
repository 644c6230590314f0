"""Launches runs of `PYTHON TRAIN --run N` through five fork-then-exec chains, in batches at
random offsets from its start, while it forks other processes around them.

Used by the end-to-end test `tests/e2e/exec_chains.rs` and by `scripts/bench/daemon.sh`
(MODE=fork-exec). The chains, two of each per batch of ten, shuffled:

- preexec:  subprocess.Popen([python3, train.py], preexec_fn=sleep 0-300 ms): python execing
            python, the name never changes;
- sh-exec:  sh -c 'exec python3 train.py';
- plain:    subprocess.Popen([python3, train.py]);
- setpriv:  python3 -> setpriv --reuid UID --regid GID --clear-groups -> python3 train.py;
- subshell: sh -c 'sleep 0.05; exec python3 train.py'.

Writes one line per run launched to OUT, `RUN CHAIN PID LAUNCHED` (LAUNCHED: the Unix time
just before the launch), then `done`, then sleeps (the caller kills its process group).

Usage: fork_exec_launch.py PYTHON TRAIN SETPRIV UID GID SEED OUT [BATCHES [SPREAD_S]]
"""
import os
import random
import subprocess
import sys
import threading
import time

py, train, setpriv, uid, gid, seed, out_path = sys.argv[1:8]
batches = int(sys.argv[8]) if len(sys.argv) > 8 else 20
spread_s = float(sys.argv[9]) if len(sys.argv) > 9 else 5.0
rng = random.Random(int(seed))
CHAINS = ["preexec", "sh-exec", "plain", "setpriv", "subshell"]
RUNS_PER_BATCH = 10


def churn():
    """A /bin/true and a bare fork every few milliseconds, for 90 s."""
    end = time.monotonic() + 90
    while time.monotonic() < end:
        subprocess.run(["/bin/true"])
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.005)


threading.Thread(target=churn, daemon=True).start()
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd="/")
out = open(out_path, "w", buffering=1)
offsets = sorted(rng.uniform(0, spread_s) for _ in range(batches))
runs, n, t0 = [], 0, time.monotonic()
for offset in offsets:
    time.sleep(max(0.0, t0 + offset - time.monotonic()))
    chains = CHAINS * (RUNS_PER_BATCH // len(CHAINS))
    rng.shuffle(chains)
    for chain in chains:
        cmd = f"{py} {train} --run {n}".split()
        launched = time.time()
        if chain == "preexec":
            delay = rng.uniform(0, 0.3)
            p = subprocess.Popen(cmd, preexec_fn=lambda d=delay: time.sleep(d), **quiet)
        elif chain == "sh-exec":
            p = subprocess.Popen(["/bin/sh", "-c", "exec " + " ".join(cmd)], **quiet)
        elif chain == "plain":
            p = subprocess.Popen(cmd, **quiet)
        elif chain == "setpriv":
            execv = "import os, sys; os.execv(sys.argv[1], sys.argv[1:])"
            become = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
            p = subprocess.Popen([py, "-c", execv, *become, *cmd], **quiet)
        else:
            p = subprocess.Popen(["/bin/sh", "-c", "sleep 0.05; exec " + " ".join(cmd)], **quiet)
        runs.append(p)  # Kept: a Popen dropped while running may be reaped by the next one.
        out.write(f"{n} {chain} {p.pid} {launched:.6f}\n")
        n += 1
out.write("done\n")
time.sleep(120)
