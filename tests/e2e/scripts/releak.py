"""Leaks, checkpoints when asked, frees, and leaks again at once: the notebook cell run again.

Runs inside a memory cgroup. Each leak grows RATE MiB/s (paced by the clock, so a slow
machine leaks no faster); when training_watchdog says a checkpoint is requested, the
script notes how long the cgroup had left at that rate, acknowledges, frees everything,
waits the next gap, and leaks again. A leak that comes within two chunks of the limit
unwarned is noted and freed (so the report survives). Writes a JSON report.

Usage: releak.py REPORT CGROUP_DIR GO_FILE [--rate-mib 50] [--gaps 0,0.5]
"""
import argparse
import json
import mmap
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import training_watchdog  # noqa: E402

MIB = 1024 * 1024
p = argparse.ArgumentParser()
p.add_argument("report")
p.add_argument("cgroup")
p.add_argument("go", help="wait until this file exists before the first leak")
p.add_argument("--rate-mib", type=float, default=50)
p.add_argument("--chunk-mib", type=float, default=2)
p.add_argument("--gaps", default="0,0.5", help="pauses after each free, seconds")
args = p.parse_args()


def cgroup_figure(name_v1, name_v2):
    for name in (name_v1, name_v2):
        try:
            with open(os.path.join(args.cgroup, name)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError):
            pass
    raise SystemExit("cannot read %s in %s" % (name_v1, args.cgroup))


limit = cgroup_figure("memory.limit_in_bytes", "memory.max")
report = {"pid": os.getpid(), "limit": limit, "leaks": []}


def save():
    tmp = args.report + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, args.report)


training_watchdog.install()
deadline = time.time() + 60
while not os.path.exists(args.go):
    if time.time() > deadline:
        raise SystemExit("no go file")
    time.sleep(0.02)

gaps = [float(g) for g in args.gaps.split(",")]
rate = args.rate_mib * MIB
chunk = int(args.chunk_mib * MIB)
for i in range(len(gaps) + 1):
    chunks = []
    t0 = time.time()
    leak = {"start": t0}
    while True:
        if training_watchdog.checkpoint_requested():
            usage = cgroup_figure("memory.usage_in_bytes", "memory.current")
            leak.update(
                warned=True,
                seconds_left=(limit - usage) / rate,
                usage=usage,
                request=training_watchdog.request(),
            )
            training_watchdog.acknowledge()
            break
        usage = cgroup_figure("memory.usage_in_bytes", "memory.current")
        if usage > limit - 2 * chunk:
            leak.update(warned=False, usage=usage)
            break
        # Pace by the clock: the k-th chunk is due at t0 + k * chunk / rate.
        due = t0 + len(chunks) * chunk / rate
        now = time.time()
        if now < due:
            time.sleep(min(due - now, 0.01))
            continue
        # An anonymous mapping of its own: freeing it returns it to the kernel at once
        # (malloc might keep a freed bytearray in its heap).
        m = mmap.mmap(-1, chunk)
        for j in range(0, chunk, 4096):
            m[j] = 1
        chunks.append(m)
    leak["held_mib"] = len(chunks) * args.chunk_mib
    for m in chunks:
        m.close()
    del chunks
    report["leaks"].append(leak)
    save()
    if i < len(gaps):
        time.sleep(gaps[i])
save()
