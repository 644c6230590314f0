#!/usr/bin/env python3
"""A busy training-like target for scripts/bench/overhead.sh.

The parent and CHILDREN-1 forked workers (so a tree of CHILDREN processes) each allocate,
touch and free memory in a loop (the parent 32 MiB every 100 ms, each worker 4 MiB every
50 ms), and every 2 s one worker exits and a new one is forked, so the tree changes under
the watcher. Runs for SECONDS, then kills its workers and exits.

Usage: busy_target.py SECONDS [CHILDREN]
"""

import os
import signal
import sys
import time


def churn(mib, period, until):
    while time.monotonic() < until:
        b = bytearray(mib << 20)  # zero-filled: every page is touched
        b[:: 4096] = b"\x01" * len(b[:: 4096])
        del b
        time.sleep(period)


def fork_worker(until):
    pid = os.fork()
    if pid == 0:
        try:
            # A worker lives 2-20 s; the parent replaces one every 2 s.
            churn(4, 0.05, until)
        finally:
            os._exit(0)
    return pid


def main():
    seconds = float(sys.argv[1])
    children = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    end = time.monotonic() + seconds
    workers = [fork_worker(end) for _ in range(children - 1)]
    next_churn = time.monotonic() + 2.0
    while time.monotonic() < end:
        churn(32, 0.1, min(end, time.monotonic() + 0.1))
        if time.monotonic() >= next_churn and workers:
            old = workers.pop(0)
            os.kill(old, signal.SIGKILL)
            os.waitpid(old, 0)
            workers.append(fork_worker(end))
            next_churn += 2.0
    for w in workers:
        try:
            os.kill(w, signal.SIGKILL)
            os.waitpid(w, 0)
        except OSError:
            pass


if __name__ == "__main__":
    main()
