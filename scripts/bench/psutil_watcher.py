#!/usr/bin/env python3
"""The baseline people write instead of watchdog: a psutil loop.

Samples, at a fixed rate, what `watchdog --pid PID --disk A --disk B --gpu off` samples:
host memory (psutil.virtual_memory), the memory cgroup's usage file (read directly: psutil
has no cgroup API), the RSS of the target and all its descendants (Process.children
(recursive=True), which scans /proc), and disk_usage of two paths. It sleeps to each
deadline like watchdog does (a tick that overruns is counted, not caught up), and exits
when the target is gone. On exit it prints one line to stderr:
`psutil_watcher: ticks N late L elapsed S`.

Usage: psutil_watcher.py --pid PID --hz RATE --disk PATH --disk PATH
"""

import argparse
import os
import signal
import sys
import time

import psutil


def cgroup_usage_file(pid):
    """The memory cgroup usage file of PID (v1 memory.usage_in_bytes or v2 memory.current)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            p = f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"
            if os.path.exists(p):
                return p
        if controllers == "":
            p = f"/sys/fs/cgroup{path}/memory.current"
            if os.path.exists(p):
                return p
    return None


def loop(target, cgroup_file, disks, period, counts):
    """Samples until the target is gone; counts[0] ticks, counts[1] late ticks."""
    deadline = time.monotonic()
    sink = 0
    while True:
        try:
            vm = psutil.virtual_memory()
            sink += vm.total - vm.available
            if cgroup_file is not None:
                with open(cgroup_file) as f:
                    sink += int(f.read())
            rss = target.memory_info().rss
            for child in target.children(recursive=True):
                try:
                    rss += child.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            sink += rss
            for d in disks:
                sink += psutil.disk_usage(d).used
        except psutil.NoSuchProcess:
            return
        counts[0] += 1
        deadline += period
        now = time.monotonic()
        if deadline < now:
            counts[1] += 1 + int((now - deadline) / period)
            deadline = now
        else:
            time.sleep(deadline - now)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--hz", type=float, required=True)
    ap.add_argument("--disk", action="append", default=[])
    args = ap.parse_args()

    # The benchmark ends the watcher with SIGTERM: leave the loop and print the counts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    target = psutil.Process(args.pid)
    cgroup_file = cgroup_usage_file(args.pid)
    counts = [0, 0]
    start = time.monotonic()
    try:
        loop(target, cgroup_file, args.disk, 1.0 / args.hz, counts)
    finally:
        elapsed = time.monotonic() - start
        print(
            f"psutil_watcher: ticks {counts[0]} late {counts[1]} elapsed {elapsed:.2f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
