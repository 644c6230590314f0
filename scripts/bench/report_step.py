#!/usr/bin/env python3
"""The client's cost per ``training_watchdog.report_step`` call, over the fake allocator.

    python3 scripts/bench/report_step.py [--steps 400] [--step-ms 50] [--spin] [--dir DIR]

Runs ``--steps`` steps of ``--step-ms`` each (a sleep stands for the step's work, so that
the write once per ``WATCHDOG_INTERVAL`` = 0.1 s happens as often as it would; with
``--spin`` a busy loop, as a process launching kernels keeps its CPU warm), with the
fake allocator (python/tests/fake_allocator.py) installed into the real torch.cuda, and
times each call (``perf_counter_ns``): the read of ``memory_stats``, the peak reset, the
entry, and the write of ``<request file>.steps`` when it is due. Three cases:

``read``     the watchdog reads (and removes) the file between two writes: each write
             carries the entries of one interval (the usual case);
``unread``   nobody reads it: every write carries 256 entries (the most a file holds), and
             the client writes less and less often (up to every 5 s);
``every``    ``WATCHDOG_INTERVAL=0`` and unread: a write at every call (the worst case).

Prints the mean, the median, the 99th percentile and the maximum per call in µs, and the
same for the calls that wrote, and the share of a ``--step-ms`` step the mean is.
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))


from stats import quantile as percentile  # noqa: E402


def run(case, steps, step_s, directory, spin):
    import training_watchdog as tw
    from training_watchdog import allocator
    from fake_allocator import FakeAllocator

    request = os.path.join(directory, "request-%s.json" % case)
    os.environ["WATCHDOG_REQUEST_FILE"] = request
    os.environ["WATCHDOG_INTERVAL"] = "0" if case == "every" else "0.1"
    allocator._reset()
    times, writes = [], []
    with FakeAllocator("leak") as fake:
        for step in range(steps):
            fake.step("train")
            before = allocator._state.last_write
            t0 = time.perf_counter_ns()
            tw.report_step(step)
            took = time.perf_counter_ns() - t0
            times.append(took)
            if allocator._state.last_write != before:
                writes.append(took)
                if case == "read":
                    os.unlink(request + ".steps")  # what the watchdog does once it has read it
            if spin:
                end = time.perf_counter() + step_s
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(step_s)
    size = os.path.getsize(request + ".steps") if os.path.exists(request + ".steps") else 0
    return times, writes, size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--step-ms", type=float, default=50.0)
    ap.add_argument("--spin", action="store_true", help="busy-wait the step instead of sleeping")
    ap.add_argument("--dir", default=None, help="where the request file is (default: a new temp dir)")
    args = ap.parse_args()
    import torch  # noqa: F401  (the training process's torch: the client uses it, never imports it)

    with tempfile.TemporaryDirectory(prefix="report-step-", dir=args.dir) as d:
        print("%d steps of %g ms (%s), request file in %s; load average %s" % (
            args.steps, args.step_ms, "spin" if args.spin else "sleep", d, "%.2f %.2f %.2f" % os.getloadavg()))
        print("%-7s %9s %9s %9s %9s | %6s %9s %9s | %7s %s" % (
            "case", "mean µs", "p50 µs", "p99 µs", "max µs", "writes", "write µs", "w p99 µs", "of step", "file"))
        for case in ("read", "unread", "every"):
            times, writes, size = run(case, args.steps, args.step_ms / 1000.0, d, args.spin)
            us = [t / 1000.0 for t in times]
            wus = [t / 1000.0 for t in writes] or [0.0]
            mean = sum(us) / len(us)
            print("%-7s %9.1f %9.1f %9.1f %9.1f | %6d %9.1f %9.1f | %6.3f%% %d B" % (
                case, mean, percentile(us, 0.5), percentile(us, 0.99), max(us), len(writes),
                sum(wus) / len(wus), percentile(wus, 0.99), 100.0 * mean / (args.step_ms * 1000.0), size))


if __name__ == "__main__":
    main()
