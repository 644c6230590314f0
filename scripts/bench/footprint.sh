#!/usr/bin/env bash
# Footprint and timer: the release binary's size, the watchdog's peak RSS with no GPU, and how
# well its timer keeps up at 10 ms and 1 ms.
#
# Size: `target/release/watchdog` as built (the release profile strips it) and, for
# reference, the size of its sections (`size`). Peak RSS: /usr/bin/time's maximum resident
# set of `watchdog --gpu off run -- sleep S` and of `watchdog --pid` (VmHWM) watching a busy
# 10-process tree. Timer: `watchdog --interval I --pid P` against `sleep` for S seconds; the
# summary line says how many ticks ran late (a tick that overruns its deadline is counted,
# not caught up); ticks done are the main thread's voluntary context switches (one per sleep),
# against S / I expected.
#
# Usage: scripts/bench/footprint.sh           (~1.5 minutes)
# Env:   RUNS=3 SECONDS_EACH=10 WATCHDOG=target/release/watchdog
set -euo pipefail

cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
S=${SECONDS_EACH:-10}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
WORK=$(mktemp -d /tmp/wd-footprint.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
[ -x "$WATCHDOG" ] || cargo build --release -p watchdog >&2
OPTS=(--gpu off --no-notify --no-status -q --request-file "$WORK/req.json")

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $(stat -c %s "$WATCHDOG") bytes ($(file -b "$WATCHDOG" | grep -o 'stripped\|not stripped'))"
size "$WATCHDOG" 2>/dev/null | tail -1 | awk '{printf "  text %d, data %d, bss %d bytes\n", $1, $2, $3}'

for i in $(seq 1 "$RUNS"); do
    /usr/bin/time -f "%M" -o "$WORK/rss" "$WATCHDOG" "${OPTS[@]}" run -- sleep 3 2>/dev/null
    echo "peak RSS, run -- sleep 3 (100 ms): $(cat "$WORK/rss") KiB"
done
for i in $(seq 1 "$RUNS"); do
    setsid python3 scripts/bench/busy_target.py 6 10 >/dev/null 2>&1 &
    t=$!
    sleep 0.5
    /usr/bin/time -f "%M" -o "$WORK/rss" "$WATCHDOG" "${OPTS[@]}" --interval 1ms --disk / --disk /dev/shm \
        --mem-limit 64GiB --pid "$t" 2>/dev/null
    wait "$t" 2>/dev/null || true
    echo "peak RSS, --pid busy 10-process tree at 1 kHz: $(cat "$WORK/rss") KiB"
done

for iv in 10ms 1ms; do
    iv_us=$(awk -v s="$iv" 'BEGIN { v = s + 0; if (s ~ /ms$/) v *= 1000; print v }')
    for i in $(seq 1 "$RUNS"); do
        sleep $((S + 1)) &
        t=$!
        "$WATCHDOG" "${OPTS[@]}" --interval "$iv" --pid "$t" 2>"$WORK/err" &
        w=$!
        sleep 0.5
        v0=$(awk '/^voluntary_ctxt_switches:/ {print $2}' /proc/$w/task/$w/status)
        sleep "$S"
        v1=$(awk '/^voluntary_ctxt_switches:/ {print $2}' /proc/$w/task/$w/status)
        wait "$w" || true
        late=$(grep -o '[0-9]* of [0-9]* ticks ran late' "$WORK/err" || echo "0 ticks ran late")
        awk -v iv="$iv" -v n=$((v1 - v0)) -v s="$S" -v us="$iv_us" -v l="$late" 'BEGIN {
            e = s * 1e6 / us
            printf "timer %s: %d wake-ups in %d s of %d expected (%.2f%%); summary: %s\n", iv, n, s, e, n * 100 / e, l }'
    done
done
