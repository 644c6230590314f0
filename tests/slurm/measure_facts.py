"""Measure what the watchdog's SLURM support relies on, on the real test cluster.

Not a test: run by hand (as root) to regenerate the facts of docs/slurm.md#measured-on-the-test-cluster::

    python3 tests/slurm/measure_facts.py > /tmp/facts.txt

It starts a cluster (tests/slurm/cluster.py) whose finished jobs are purged after 10 s,
submits every job at once, and prints, for each case, the commands run and their exact
output: ``squeue -o '%e %T %r'`` and the ``scontrol show job -o`` fields, as seen from
outside the job and from inside it (a SIGTERM trap in the batch script), the job's
environment, which processes get which signal (``signals.py`` logs each one, in a python
and in its forked child), and the memory cgroups of a batch step and an ``srun`` step.
About three minutes.
"""

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as slurm  # noqa: E402

FIELDS = "JobState|Reason|Requeue|Restarts|BatchFlag|TimeLimit|EndTime|RunTime"

# Inside a job: the controller's view of the job, with the time it was asked.
SNAP = r"""
snap() {
    echo "== inside: $1 at $(date +%s)"
    echo "\$ SLURM_TIME_FORMAT=%s squeue -h -j $SLURM_JOB_ID -o '%e %T %r'"
    SLURM_TIME_FORMAT=%s squeue -h -j "$SLURM_JOB_ID" -o '%e %T %r'; echo "(exit $?)"
    echo "\$ scontrol show job -o $SLURM_JOB_ID | (fields)"
    scontrol show job -o "$SLURM_JOB_ID" | tr ' ' '\n' | grep -E '^(FIELDS)=' | tr '\n' ' '; echo
}
""".replace("FIELDS", FIELDS)

# A python that traps SIGTERM and USR1 and has a child that traps them too; each logs
# what it got and when, and keeps running (so SIGKILL ends them).
SIGNALS_PY = r"""
import os, signal, sys, time
role = "parent"
def handler(sig, frame):
    name = signal.Signals(sig).name
    print("python %s pid %d got %s at %.1f" % (role, os.getpid(), name, time.time()), flush=True)
for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCONT):
    signal.signal(s, handler)
if os.fork() == 0:
    role = "child"
print("python %s pid %d ready" % (role, os.getpid()), flush=True)
while True:
    time.sleep(0.1)
"""

# The batch shell traps SIGTERM and USR1 too, and runs the python as a child.
TRAPPING_SHELL = """#!/bin/bash
SNAP
echo "bash pid $$ ready"
echo "SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT-unset}"
snap start
trap 'echo "bash got TERM at $(date +%s.%N | cut -c1-12)"; snap TERM; sleep 4; snap TERM+4' TERM
trap 'echo "bash got USR1 at $(date +%s.%N | cut -c1-12)"' USR1
python3 -u signals.py &
while true; do sleep 1 & wait $!; done
""".replace("SNAP", SNAP)

# The batch shell becomes the python (exec), as `exec watchdog run` does.
EXEC_PYTHON = """#!/bin/bash
echo "bash pid $$ execs python3"
exec python3 -u signals.py
"""

# The batch shell runs the python in the foreground (as `watchdog run` not exec'ed), or
# through srun (a step of its own).
FOREGROUND = """#!/bin/bash
echo "bash pid $$ ready"
python3 -u signals.py
echo "python exited $?"
"""

SRUN = """#!/bin/bash
echo "bash pid $$ ready"
srun --ntasks=1 python3 -u signals.py
echo "srun exited $?"
"""

ENV_DUMP = """#!/bin/sh
env | sort | grep -E '^(SLURM|SLURMD)_'
echo "SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT-unset}"
"""

# The memory cgroup of the batch step and of an srun step's two tasks, with the limit of
# each task's parent (the step).
CGROUPS = """#!/bin/sh
echo "batch: $(grep memory /proc/self/cgroup)"
srun --ntasks=2 sh -c '
    cg=$(grep memory /proc/self/cgroup | cut -d: -f3)
    limit=$(cat /sys/fs/cgroup/memory$cg/../memory.limit_in_bytes)
    echo "srun task $SLURM_PROCID (step $SLURM_STEP_ID): $cg, step limit $limit"
    sleep 2'
"""


def sh(c, *argv, env=None):
    """Run a command (as root, against the cluster); print it and its output; return it."""
    t0 = time.monotonic()
    proc = subprocess.run(list(argv), env=dict(c.env, **(env or {})), capture_output=True, text=True)
    ms = (time.monotonic() - t0) * 1000
    prefix = " ".join("%s=%s" % kv for kv in (env or {}).items())
    print("$ %s%s" % (prefix + " " if prefix else "", " ".join(
        a if " " not in a and "%" not in a else "'%s'" % a for a in argv)))
    for stream in (proc.stdout, proc.stderr):
        if stream.strip():
            print(stream.rstrip())
    print("(exit %d, %.0f ms)" % (proc.returncode, ms))
    return proc


def outside(c, job, label):
    print("== outside: job %d, %s, at %d" % (job, label, time.time()))
    sh(c, "squeue", "-h", "-j", str(job), "-o", "%e %T %r", env={"SLURM_TIME_FORMAT": "%s"})
    fields = c.job(job)
    if fields is None:
        print("scontrol: job gone")
    else:
        print("scontrol fields: " + " ".join("%s=%s" % (k, fields.get(k)) for k in FIELDS.split("|")))
    print()


def submit(c, name, script, *args):
    workdir = c.workdir(name)
    with open(os.path.join(workdir, "signals.py"), "w") as f:
        f.write(SIGNALS_PY)
    job = c.sbatch(script, *args, workdir=workdir)
    print("submitted %s: job %d (%s)" % (name, job, " ".join(args)))
    return job


def running(c, job, marker="ready"):
    c.wait_for(job, lambda j: j is not None and j["JobState"] == "RUNNING" and marker in c.log_of(job), 60)


def main():
    c = slurm.Cluster(min_job_age=10).start()
    try:
        measure(c)
    finally:
        c.stop()
        print("leftovers after stop(): %s" % c.leftovers())


def measure(c):
    print("# config")
    out = sh(c, "scontrol", "show", "config").stdout
    for line in out.splitlines():
        if line.split("=")[0].strip() in ("OverTimeLimit", "KillWait", "MinJobAge", "SLURM_VERSION",
                                          "MessageTimeout", "JobRequeue", "BatchStartTimeout"):
            print("  " + line.strip())
    print()
    jobs = {
        "limit": submit(c, "limit", TRAPPING_SHELL, "--time=1"),
        "exec": submit(c, "exec", EXEC_PYTHON, "--time=1"),
        "unlimited": submit(c, "unlimited", TRAPPING_SHELL),
        "update": submit(c, "update", TRAPPING_SHELL, "--time=5"),
        "requeue": submit(c, "requeue", TRAPPING_SHELL, "--time=5"),
        "usr1": submit(c, "usr1", TRAPPING_SHELL, "--time=5"),
        "env": submit(c, "env", ENV_DUMP, "--time=1"),
        "env-none": submit(c, "env-none", ENV_DUMP, "--time=1", "--export=NONE"),
        "cgroups": submit(c, "cgroups", CGROUPS, "--time=1", "--ntasks=2", "--mem=400M"),
        "gone": submit(c, "gone", ENV_DUMP, "--time=1"),
        "fg-limit": submit(c, "fg-limit", FOREGROUND, "--time=1"),
        "srun-limit": submit(c, "srun-limit", SRUN, "--time=1"),
        "full-usr1": submit(c, "full-usr1", FOREGROUND),
        "signal-B": submit(c, "signal-B", FOREGROUND, "--time=2", "--signal=B:USR1@100"),
        "signal-noB": submit(c, "signal-noB", SRUN, "--time=2", "--signal=USR1@100"),
    }
    for name in ("limit", "unlimited", "update", "requeue", "usr1"):
        running(c, jobs[name])
    for name in ("exec", "fg-limit", "srun-limit", "full-usr1", "signal-B", "signal-noB"):
        running(c, jobs[name], "child pid")

    print("\n# (a)(b) a running job with a time limit, and an UNLIMITED one")
    outside(c, jobs["limit"], "running, --time=1")
    outside(c, jobs["unlimited"], "running, no --time (partition MaxTime=INFINITE)")

    print("# squeue -h -j ID -o '%e %T %r': 20 calls, one after another")
    times = []
    for _ in range(20):
        t0 = time.monotonic()
        subprocess.run(["squeue", "-h", "-j", str(jobs["limit"]), "-o", "%e %T %r"],
                       env=dict(c.env, SLURM_TIME_FORMAT="%s"), capture_output=True)
        times.append((time.monotonic() - t0) * 1000)
    print("ms: median %.1f, min %.1f, max %.1f" % (statistics.median(times), min(times), max(times)))
    print()

    print("# TimeLimit moved on a running job")
    outside(c, jobs["update"], "running, --time=5")
    sh(c, "scontrol", "update", "JobId=%d" % jobs["update"], "TimeLimit=2")
    outside(c, jobs["update"], "after TimeLimit=2")
    sh(c, "scontrol", "update", "JobId=%d" % jobs["update"], "TimeLimit=UNLIMITED")
    outside(c, jobs["update"], "after TimeLimit=UNLIMITED")

    print("# scancel --signal=USR1 --batch (who gets it)")
    sh(c, "scancel", "--signal=USR1", "--batch", str(jobs["usr1"]))
    time.sleep(3)
    print("-- log:\n" + c.log_of(jobs["usr1"]))
    print("# scancel --signal=USR1 (no --batch)")
    sh(c, "scancel", "--signal=USR1", str(jobs["usr1"]))
    time.sleep(3)
    print("-- log:\n" + c.log_of(jobs["usr1"]))

    print("# scancel --full --signal=USR1 (every process of the batch step)")
    sh(c, "scancel", "--full", "--signal=USR1", str(jobs["full-usr1"]))
    time.sleep(3)
    print("-- log:\n" + c.log_of(jobs["full-usr1"]))

    print("# scancel of a running job (trap snaps inside during KillWait)")
    sh(c, "scancel", str(jobs["unlimited"]))
    outside(c, jobs["unlimited"], "right after scancel")
    time.sleep(6)
    outside(c, jobs["unlimited"], "6 s after scancel")

    print("# scontrol requeue of a running job")
    sh(c, "scontrol", "requeue", str(jobs["requeue"]))
    outside(c, jobs["requeue"], "right after requeue")
    c.wait_for(jobs["requeue"], lambda j: j["JobState"] == "PENDING", 60)
    outside(c, jobs["requeue"], "pending after requeue")
    sh(c, "scontrol", "show", "job", "-o", str(jobs["requeue"]))
    c.release(jobs["requeue"])
    t0 = time.time()
    c.wait_for(jobs["requeue"], lambda j: "SLURM_RESTART_COUNT=1" in c.log_of(jobs["requeue"]), 60)
    print("released: running again %.1f s after StartTime=now" % (time.time() - t0))
    outside(c, jobs["requeue"], "running after release")

    print("# a job that is gone")
    c.wait_for(jobs["gone"], lambda j: j is None, 120)
    sh(c, "squeue", "-h", "-j", str(jobs["gone"]), "-o", "%e %T %r", env={"SLURM_TIME_FORMAT": "%s"})
    sh(c, "scontrol", "show", "job", "-o", str(jobs["gone"]))
    print()

    print("# the time limit: outside, while it passes")
    c.wait_for(jobs["limit"], lambda j: j["JobState"] != "RUNNING", 150)
    outside(c, jobs["limit"], "first state after RUNNING")
    c.wait_for(jobs["exec"], lambda j: j["JobState"] != "RUNNING", 60)
    time.sleep(12)  # KillWait
    outside(c, jobs["limit"], "after KillWait")
    # --signal=[B:]USR1@100 on a two-minute job: sent by the same periodic check.
    for name in ("signal-B", "signal-noB"):
        c.wait_for(jobs[name], lambda j: j is None or j["JobState"] != "RUNNING"
                   or "USR1" in c.log_of(jobs[name]), 90)

    for name in ("limit", "exec", "fg-limit", "srun-limit", "signal-B", "signal-noB", "unlimited",
                 "requeue", "env", "env-none", "cgroups", "update"):
        print("\n# log of %s (job %d)\n%s" % (name, jobs[name], c.log_of(jobs[name])))
    print("\n# the daemons' log lines of the time-limited job %d" % jobs["limit"])
    for log in ("slurmctld.log", "slurmd.log"):
        with open(c.path("log", log)) as f:
            for line in f:
                if "JobId=%d " % jobs["limit"] in line or "job %d " % jobs["limit"] in line.lower() \
                        or "StepId=%d." % jobs["limit"] in line:
                    print("%s: %s" % (log, line.rstrip()))
    for name in ("update", "requeue", "usr1", "full-usr1", "signal-noB"):
        c.run("scancel", str(jobs[name]), check=False)


if __name__ == "__main__":
    main()
