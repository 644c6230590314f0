"""Host memory that moves as on a live machine, for the at-rest benchmarks (MOVING_MEMINFO=1).

Every 2 s: allocate 1% of MemTotal and write every page of it (so that MemAvailable drops by
that much), hold it 1 s, free it (back to the kernel: a buffer this large is its own mmap),
wait 1 s. Host memory rises and falls by 1% of its limit every 2 s, more than the 0.5% a
rise between two samples that the sample-rate policy notices.

Usage: python3 scripts/bench/mem_mover.py [SECONDS]     (default: until killed)
"""

import sys
import time


def mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("mem_mover: no MemTotal in /proc/meminfo")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else float("inf")
    size = mem_total() // 100
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        buf = b"\x01" * size  # written, so every page is faulted in
        time.sleep(1.0)
        del buf
        time.sleep(1.0)


if __name__ == "__main__":
    main()
