#!/usr/bin/env python3
"""Small real workloads for scripts/record_trace.py (standard library only).

    record_workloads.py leak MIB_PER_S          pure-Python training loop: per-step
                                                 activations (saw-tooth) plus a leak
                                                 (a history list that is never trimmed)
    record_workloads.py sawtooth BASE_MIB PEAK_MIB PERIOD_S SECONDS
                                                 allocate up to PEAK, free back to BASE,
                                                 repeatedly; never exhausts
    record_workloads.py checkpoints DIR MIB EVERY_S
                                                 write MIB checkpoint files into DIR every
                                                 EVERY_S seconds (1 MiB writes, fsync,
                                                 rename) until ENOSPC; prints
                                                 `EXHAUSTED <time.monotonic()>` then
"""

import errno
import os
import sys
import time

MIB = 1 << 20


def touch(buf):
    # Write one byte per page so the memory is really resident.
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    return buf


def leak(rate_mib):
    history = []
    step = 0
    start = time.monotonic()
    while True:
        # One "training step": activations that are freed at the end of the step.
        acts = [touch(bytearray(MIB)) for _ in range(24)]
        total = sum(len(a) for a in acts)
        # The leak: metrics kept forever.
        target = int((time.monotonic() - start) * rate_mib)
        while len(history) < target:
            history.append(touch(bytearray(MIB)))
        step += 1
        time.sleep(0.05)
        del acts
        _ = total


def sawtooth(base_mib, peak_mib, period, seconds):
    base = [touch(bytearray(MIB)) for _ in range(base_mib)]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        grow = []
        t0 = time.monotonic()
        # Ramp up over 70% of the period, then free everything at once.
        n = peak_mib - base_mib
        for i in range(n):
            grow.append(touch(bytearray(MIB)))
            target = t0 + 0.7 * period * (i + 1) / n
            d = target - time.monotonic()
            if d > 0:
                time.sleep(d)
        del grow
        d = t0 + period - time.monotonic()
        if d > 0:
            time.sleep(d)
    _ = base


def checkpoints(directory, mib, every):
    chunk = os.urandom(MIB)
    n = 0
    while True:
        t0 = time.monotonic()
        tmp = os.path.join(directory, f".ckpt-{n}.tmp")
        try:
            with open(tmp, "wb") as f:
                for _ in range(mib):
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, os.path.join(directory, f"ckpt-{n}.pt"))
        except OSError as e:
            if e.errno == errno.ENOSPC:
                print(f"EXHAUSTED {time.monotonic():.6f}", flush=True)
                return
            raise
        n += 1
        d = t0 + every - time.monotonic()
        if d > 0:
            time.sleep(d)


def main():
    what = sys.argv[1]
    args = sys.argv[2:]
    if what == "leak":
        leak(float(args[0]))
    elif what == "sawtooth":
        sawtooth(int(args[0]), int(args[1]), float(args[2]), float(args[3]))
    elif what == "checkpoints":
        checkpoints(args[0], int(args[1]), float(args[2]))
    else:
        sys.exit(f"unknown workload {what!r}")


if __name__ == "__main__":
    main()
