#!/usr/bin/env python3
"""Record a usage trace of a real process for the predictor's corpus (tests/traces/rec_*.csv).

Standard library only; needs root for the memory cgroup and tmpfs modes.

    python3 scripts/record_trace.py --out FILE --name NAME --shape TEXT --lead S \\
        (--cgroup-limit BYTES | --disk PATH) [--hz 50] [--max-s 120] -- CMD [ARGS...]

Memory mode (--cgroup-limit): creates the v1 memory cgroup
/sys/fs/cgroup/memory/wd-rec-<pid> with that limit (swap off for it), starts
CMD inside it (the child joins the cgroup before exec), and samples
memory.usage_in_bytes against memory.limit_in_bytes through kept-open
descriptors read with pread. When the kernel OOM-kills the child (SIGKILL and
memory.oom_control's oom_kill went up), the time of the usage peak in the
last second before the recorder saw it die is the truth written as
`# exhausts_at:` (the trace is cut there).

Disk mode (--disk PATH): samples statvfs(PATH): used = (f_blocks - f_bfree) *
f_frsize against f_blocks * f_frsize. The child prints `EXHAUSTED <t>` on
stdout (t from time.monotonic(), a system-wide clock) when it gets ENOSPC;
that is the truth.

When the child exits by itself without exhausting anything, the trace is
written with `# exhausts_at: never`. The header format is the one
scripts/gen_traces.py writes (see docs/prediction.md).
"""

import argparse
import os
import signal
import subprocess
import sys
import time

CG_ROOT = "/sys/fs/cgroup/memory"


def read_int(fd):
    return int(os.pread(fd, 64, 0).split()[0])


def oom_kills(cg):
    with open(os.path.join(cg, "memory.oom_control")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--lead", type=float, required=True)
    ap.add_argument("--hz", type=float, default=50.0)
    ap.add_argument("--max-s", type=float, default=120.0)
    ap.add_argument("--cgroup-limit", type=int)
    ap.add_argument("--disk")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd or (a.cgroup_limit is None) == (a.disk is None):
        ap.error("give a command and exactly one of --cgroup-limit or --disk")

    cg = None
    if a.cgroup_limit is not None:
        cg = os.path.join(CG_ROOT, f"wd-rec-{os.getpid()}")
        os.mkdir(cg)
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(a.cgroup_limit))
        try:
            with open(os.path.join(cg, "memory.memsw.limit_in_bytes"), "w") as f:
                f.write(str(a.cgroup_limit))
        except OSError:
            pass
        with open(os.path.join(cg, "memory.swappiness"), "w") as f:
            f.write("0")
        procs = os.path.join(cg, "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        usage_fd = os.open(os.path.join(cg, "memory.usage_in_bytes"), os.O_RDONLY)
        limit_fd = os.open(os.path.join(cg, "memory.limit_in_bytes"), os.O_RDONLY)
        resource = "cgroup_memory"
        kills_before = oom_kills(cg)

        def sample():
            return read_int(usage_fd), read_int(limit_fd)
    else:
        join = None
        resource = f"disk:{a.disk}"

        def sample():
            st = os.statvfs(a.disk)
            return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize

    period = 1.0 / a.hz
    rows = []
    child = subprocess.Popen(cmd, preexec_fn=join, stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    next_t = t0
    died_at = None
    try:
        while True:
            now = time.monotonic()
            used, limit = sample()
            rows.append((now - t0, used, limit))
            if child.poll() is not None:
                died_at = time.monotonic() - t0
                break
            if now - t0 > a.max_s:
                child.kill()
                child.wait()
                break
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    finally:
        out = child.stdout.read() if child.stdout else ""
    exhausts = None
    status = child.returncode
    for line in out.splitlines():
        if line.startswith("EXHAUSTED "):
            exhausts = float(line.split()[1]) - t0
    if cg is not None:
        if status == -signal.SIGKILL and oom_kills(cg) > kills_before:
            # The kernel kills at the peak; the recorder notices the exit only after the
            # victim's memory was torn down (usage already falling). The peak of the last
            # second is the kill time.
            tail = [r for r in rows if r[0] >= died_at - 1.0]
            exhausts = max(tail, key=lambda r: r[1])[0] if tail else died_at
        os.close(usage_fd)
        os.close(limit_fd)
        os.rmdir(cg)
    if exhausts is not None:
        # The trace ends where the resource ran out.
        rows = [r for r in rows if r[0] <= exhausts + 1e-9]
    with open(a.out, "w") as f:
        f.write(f"# trace: {a.name}\n# shape: {a.shape}\n")
        f.write(f"# source: recorded on this machine by scripts/record_trace.py at {a.hz:g} Hz; "
                f"child exit status {status}\n")
        f.write(f"# resource: {resource}\n")
        f.write("# exhausts_at: %s\n" % ("never" if exhausts is None else f"{exhausts:.3f}"))
        f.write(f"# lead_s: {a.lead:g}\n# interval_s: {period:g}\n")
        f.write("time,used,limit\n")
        for t, u, l in rows:
            f.write(f"{t:.3f},{u},{l}\n")
    print(f"{a.out}: {len(rows)} samples, exit {status}, exhausts_at {exhausts}", file=sys.stderr)


if __name__ == "__main__":
    main()
