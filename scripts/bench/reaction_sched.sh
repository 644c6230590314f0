#!/usr/bin/env bash
# reaction.sh (MODE=cgroup, kernel wakes) under `perf record`, to see where a slow trial's
# milliseconds go: the scheduler's switches and wake-ups of the watchdog's and the target's
# threads (with kernel stacks), CPU samples at 2 kHz, and each pidfd_send_signal, on
# CLOCK_MONOTONIC so that they line up with the target's own stamps. Trials slower than
# SLOW_MS keep their debug log and events in OUT_DIR (reaction.sh's KEEP_SLOW).
#
# Usage: scripts/bench/reaction_sched.sh      (root, cgroup v1, perf; ~3 min a 100 trials)
# Env:   TRIALS=100 SLOW_MS=3 OUT_DIR=/tmp/wd-reaction-sched WATCHDOG=target/release/watchdog
# Then:  perf script -i OUT_DIR/perf.data -F comm,tid,cpu,time,event,trace,ip,sym
#        (the Nth pidfd_send_signal is trial N of OUT_DIR/rows.tsv)
set -euo pipefail
cd "$(dirname "$0")/../.."
WATCHDOG=${WATCHDOG:-target/release/watchdog}
OUT_DIR=${OUT_DIR:-/tmp/wd-reaction-sched}
comm=$(basename "$WATCHDOG" | cut -c1-15)
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
perf record -k CLOCK_MONOTONIC -a -g -o "$OUT_DIR/perf.data" \
    -e cpu-clock -F 2000 \
    -e sched:sched_switch --filter "prev_comm ~ \"$comm*\" || next_comm ~ \"$comm*\" || prev_comm ~ \"target*\" || next_comm ~ \"target*\"" \
    -e sched:sched_wakeup --filter "comm ~ \"$comm*\" || comm ~ \"target*\"" \
    -e syscalls:sys_enter_pidfd_send_signal \
    -- env KEEP_SLOW="$OUT_DIR" SLOW_MS="${SLOW_MS:-3}" MODE=cgroup WAKES=kernel INTERVALS=100ms \
    TRIALS="${TRIALS:-100}" WATCHDOG="$WATCHDOG" OUT="$OUT_DIR/rows.tsv" scripts/bench/reaction.sh
