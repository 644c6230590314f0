#!/usr/bin/env bash
# What a wake costs at rest, two builds side by side (issue 31, "A cheap wake").
#
# Each build watches its own `sleep` in its own 4 GiB v1 memory cgroup at the defaults
# (`--pid PID --no-notify --no-status -q`, the working directory /tmp), both started at once
# (START order, the second 0.3 s after the first) so that both see the same machine. After
# WARMUP seconds (past the first lead, 30 s by default, when the adaptive rates settle) it
# reads each one's wake-ups (the main thread's voluntary context switches) and CPU time
# (schedstat, all threads) over DURATION seconds, then runs `strace -c -f` on both at once
# over DURATION seconds more and prints the system calls a wake (calls / polls).
#
# Usage: scripts/bench/cheap_wake.sh OLD_BINARY NEW_BINARY     (root, cgroup v1; ~2 minutes)
# Env:   DURATION=30 WARMUP=45 START="old new" REPEAT=1 STRACE=1 (0: CPU only)
set -euo pipefail

OLD=${1:?usage: cheap_wake.sh OLD_BINARY NEW_BINARY}
NEW=${2:?usage: cheap_wake.sh OLD_BINARY NEW_BINARY}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-45}
START=${START:-"old new"}
REPEAT=${REPEAT:-1}
STRACE=${STRACE:-1}
MOUNT=/sys/fs/cgroup/memory
[ -e "$MOUNT/memory.limit_in_bytes" ] || { echo "cheap_wake.sh: no cgroup v1 memory hierarchy at $MOUNT" >&2; exit 2; }
WORK=$(mktemp -d /tmp/wd-cheap-wake.XXXXXX)
declare -A BIN=([old]="$OLD" [new]="$NEW") W T
clean_up() {
    for b in old new; do
        [ -n "${W[$b]:-}" ] && kill -INT "${W[$b]}" 2>/dev/null
        [ -n "${T[$b]:-}" ] && kill "${T[$b]}" 2>/dev/null
    done
    wait 2>/dev/null || true
    rmdir "$MOUNT"/wd-cheap-wake-$$-* 2>/dev/null || true
    rm -rf "$WORK"
}
trap clean_up EXIT
cd /tmp

on_cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }
wakes() { awk '/^voluntary_ctxt_switches:/ {print $2}' /proc/"$1"/task/"$1"/status; }

echo "# $(nproc) cores, kernel $(uname -r); DURATION=${DURATION}s WARMUP=${WARMUP}s; old $OLD, new $NEW" >&2
for run in $(seq 1 "$REPEAT"); do
    for b in $START; do
        cg="$MOUNT/wd-cheap-wake-$$-$b"
        mkdir "$cg"
        echo $((4 << 30)) >"$cg/memory.limit_in_bytes"
        sh -c 'echo $$ > "$0/cgroup.procs" && exec sleep 100000' "$cg" &
        T[$b]=$!
        sleep 0.3
        "${BIN[$b]}" --pid "${T[$b]}" --no-notify --no-status -q 2>"$WORK/$b.err" &
        W[$b]=$!
    done
    sleep "$WARMUP"
    declare -A v0 c0
    for b in old new; do v0[$b]=$(wakes "${W[$b]}"); c0[$b]=$(on_cpu_ns "${W[$b]}"); done
    load=$(cut -d' ' -f1 /proc/loadavg)
    sleep "$DURATION"
    for b in old new; do
        v=$(($(wakes "${W[$b]}") - ${v0[$b]}))
        c=$(($(on_cpu_ns "${W[$b]}") - ${c0[$b]}))
        awk -v b="$b" -v r="$run" -v o="$START" -v l="$load" -v v="$v" -v c="$c" -v s="$DURATION" 'BEGIN {
            printf "run %s (start %s, load %s) %s: %.2f wake-ups/s, %.4f%% of a core, %.0f us a wake-up\n",
                r, o, l, b, v / s, c / s / 1e7, c / 1e3 / v }'
    done
    if [ "$STRACE" = 1 ]; then
        for b in old new; do
            timeout -s INT "$DURATION" strace -c -f -p "${W[$b]}" -o "$WORK/$b.strace" 2>/dev/null &
        done
        sleep "$DURATION"
        sleep 1
        for b in old new; do
            echo "run $run $b: strace -c -f over ${DURATION}s"
            cat "$WORK/$b.strace"
            awk '$NF == "poll" {p = $4} $NF == "total" {t = $4} END {
                printf "%d system calls over %d polls: %.1f a wake\n", t, p, t / p }' "$WORK/$b.strace"
        done
    fi
    for b in old new; do
        kill -INT "${W[$b]}" 2>/dev/null
        kill "${T[$b]}" 2>/dev/null
        W[$b]=""
        T[$b]=""
    done
    wait 2>/dev/null || true
    rmdir "$MOUNT"/wd-cheap-wake-$$-* 2>/dev/null || true
done
