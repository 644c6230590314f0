"""A leak that leaves its launcher: the end-to-end tests of backgrounded and double-forked runs.

Usage: orphan_leak.py REPORT --limit-mib N [--double-fork] [--exit-code C]
                      [--step-mib S] [--every SECONDS]

With --double-fork the process started by the watchdog forks a middle process that forks
the leaker and exits at once; the first process reaps the middle one and exits with
--exit-code, so only the grandchild (re-parented away from the run's first process) leaks.
Without it, this process leaks itself (run it with `sh -c '... & exit C'`).

The leaker catches SIGUSR1 and grows its memory by --step-mib every --every seconds,
measuring its own RSS (/proc/self/statm) after each step, until the RSS has passed
--limit-mib; then it exits. The report (JSON, written at the end) holds wall-clock times:
when SIGUSR1 arrived, when the request file ($WATCHDOG_REQUEST_FILE) first existed, and
when the RSS first reached the limit, so the test measures the warning's lead itself.
"""
import argparse
import json
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("report")
p.add_argument("--limit-mib", type=float, required=True)
p.add_argument("--double-fork", action="store_true")
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--step-mib", type=float, default=2)
p.add_argument("--every", type=float, default=0.08)
args = p.parse_args()

if args.double_fork:
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)
        sys.exit(args.exit_code)
    if os.fork():
        os._exit(0)

PAGE = os.sysconf("SC_PAGE_SIZE")
report = {"pid": os.getpid(), "ppid_at_start": os.getppid(), "signal_t": None, "request_t": None}


def on_usr1(signum, frame):
    if report["signal_t"] is None:
        report["signal_t"] = time.time()


signal.signal(signal.SIGUSR1, on_usr1)
request = os.environ.get("WATCHDOG_REQUEST_FILE", "")


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / (1024 * 1024)


chunks = []
report["start_t"] = time.time()
while True:
    b = bytearray(int(args.step_mib * 1024 * 1024))
    for i in range(0, len(b), 4096):
        b[i] = 1
    chunks.append(b)
    now = time.time()
    if report["request_t"] is None and request and os.path.exists(request):
        report["request_t"] = now
    if rss_mib() >= args.limit_mib:
        report["limit_t"] = now
        break
    time.sleep(args.every)
report["ppid_at_end"] = os.getppid()
report["end_t"] = time.time()
tmp = args.report + ".tmp"
with open(tmp, "w") as f:
    json.dump(report, f)
os.replace(tmp, args.report)
