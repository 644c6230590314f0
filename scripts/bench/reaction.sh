#!/usr/bin/env bash
# Reaction time: from the instant a process's memory crosses the watchdog's headroom floor to
# the instant its SIGUSR1 handler runs, both on CLOCK_MONOTONIC in the target.
#
# Each trial is a fresh `watchdog --interval I --mem-limit L run -- reaction_target ...`
# (scripts/bench/reaction_target.c, compiled here with cc). The target touches BASE_MIB,
# holds still for HOLD (at least 5 intervals and 300 ms: the watchdog has sampled it many
# times) plus a random 0..interval (so the jump falls at a random phase of the watchdog's
# ticks), then touches JUMP_MIB more in 64 KiB chunks. L is set so that the 5% floor line
# sits CROSS_AT_MIB above the target's steady RSS: the floor is crossed within the first few
# milliseconds of the jump, and the target records the instant the chunk carrying it over the
# line was touched ("cross"). The jump itself (200 MiB of page faults) takes longer; the
# table also shows signal - jump start and how long the jump took.
#
# The request file (written and renamed before the signal is sent, not fsynced) goes to REQ_DIR,
# /dev/shm by default, where XDG_RUNTIME_DIR would put it; REQ_DIR=/tmp puts it on a disk.
#
# MODE=cgroup (root, cgroup v1): the same on a memory cgroup's limit. The target runs alone in
# a fresh v1 memory cgroup and the watchdog attaches with `--pid` from outside it; the limit
# is set so the floor line sits CROSS_AT_MIB above the cgroup's steady `cgroup_memory` (read
# by the target itself after the hold), BASE_MIB defaults to 400 and JUMP_MIB to
# CROSS_AT_MIB + 8 (the jump must stay under the limit). Each of WAKES is run per interval:
# `kernel` lets the watchdog arm its v1 usage threshold, `poll` runs it in a mount namespace
# where cgroupfs is read-only (as under ProtectControlGroups=yes), so it can only poll.
#
# Usage: scripts/bench/reaction.sh        (~2 minutes)
#        MODE=cgroup INTERVALS="10ms 1s" WAKES="kernel poll" TRIALS=20 scripts/bench/reaction.sh
# Env:   TRIALS=50 REQ_DIR=/dev/shm INTERVALS="10ms 100ms" JUMP_MIB=200 BASE_MIB=48 CROSS_AT_MIB=8
#        WATCHDOG=target/release/watchdog  OUT=file (raw rows, TSV)
#        KEEP_SLOW=DIR SLOW_MS=20 (MODE=cgroup): keep each slow trial's events and debug log
#        NICE=-5 (MODE=cgroup): the watchdog runs at this niceness (watchdog@.service has Nice=-5)
#        PIN=1 (MODE=cgroup): the target on CPU 0 and the watchdog on CPU 1 (taskset), so the
#          scheduler cannot place the woken watchdog behind the page-faulting target
#        BUSY=2: that many CPU spinners (busy shell loops at niceness 0) run through every
#          trial, so the watchdog, the target and the spinners share the cores (2 here)
set -euo pipefail

cd "$(dirname "$0")/../.."
TRIALS=${TRIALS:-50}
INTERVALS=${INTERVALS:-"10ms 100ms"}
MODE=${MODE:-rss}
WAKES=${WAKES:-"kernel poll"}
CROSS_AT_MIB=${CROSS_AT_MIB:-8}
if [ "$MODE" = cgroup ]; then
    JUMP_MIB=${JUMP_MIB:-$((CROSS_AT_MIB + 8))}
    BASE_MIB=${BASE_MIB:-400}
else
    JUMP_MIB=${JUMP_MIB:-200}
    BASE_MIB=${BASE_MIB:-48}
fi
FLOOR=5
WATCHDOG=${WATCHDOG:-target/release/watchdog}
NICE=${NICE:-}
OUT=${OUT:-}
KEEP_SLOW=${KEEP_SLOW:-}
SLOW_MS=${SLOW_MS:-20}
BUSY=${BUSY:-0}
PIN=${PIN:-}
SPINNERS=()
WORK=$(mktemp -d /tmp/wd-reaction.XXXXXX)
REQ_DIR=${REQ_DIR:-/dev/shm}
REQ=$(mktemp -u "$REQ_DIR/wd-reaction-req.XXXXXX")
stop_spinners() { [ ${#SPINNERS[@]} -eq 0 ] || kill "${SPINNERS[@]}" 2>/dev/null || true; }
trap 'stop_spinners; rm -rf "$WORK" "$REQ".json*' EXIT

if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
cc -O2 -Wall -o "$WORK/target" scripts/bench/reaction_target.c

for _ in $(seq 1 "$BUSY"); do
    (trap - EXIT; while :; do :; done) &
    SPINNERS+=($!)
done

rows="$WORK/rows.tsv"
printf 'interval\ttrial\tsig_minus_cross_ms\tsig_minus_jump_ms\tjump_ms\treason\n' >"$rows"
# The milliseconds of an interval such as 10ms, 1s or 500us.
ms_of() { awk -v s="$1" 'BEGIN { v = s + 0; if (s ~ /us$/) v /= 1000; else if (s ~ /s$/ && s !~ /ms$/) v *= 1000; print v }'; }
# A random phase between the watchdog's ticks and the jump: whole milliseconds under $1 ms.
jitter_of() { echo $((RANDOM % $(awk -v i="$1" 'BEGIN { j = int(i); print (j < 1 ? 1 : j) }'))); }

# Appends the row of one trial to $rows: record LABEL TRIAL TARGET_LINE REQUEST_FILE.
# KEEP_SLOW=DIR: a trial whose signal came more than SLOW_MS after the crossing keeps its
# watchdog's events and debug log (WATCHDOG_LOG=debug) in DIR/NAME.{events.jsonl,log}.
keep_if_slow() {
    [ -n "$KEEP_SLOW" ] || return 0
    local ms
    ms=$(tail -1 "$rows" | cut -f3)
    if awk -v m="$ms" -v s="$SLOW_MS" 'BEGIN { exit !(m != "nan" && m + 0 > s + 0) }'; then
        mkdir -p "$KEEP_SLOW"
        cp "$WORK/events.jsonl" "$KEEP_SLOW/$1.events.jsonl" 2>/dev/null || true
        cp "$WORK/wd.err" "$KEEP_SLOW/$1.log"
        cp "$WORK/line" "$KEEP_SLOW/$1.line"
        echo "trial $1: signal $ms ms after the crossing, kept in $KEEP_SLOW" >&2
    fi
}

record() {
    local label=$1 trial=$2 line=$3 req=$4 reason jump cross done sig
    reason=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["resource"]+":"+d["reason"])' "$req" 2>/dev/null || echo none)
    read -r jump cross done sig <<<"$line" || true
    if [ "${jump:-error}" = error ] || [ -z "${sig:-}" ]; then
        echo "trial $label #$trial failed: $line $(tail -2 "$WORK/wd.err")" >&2
        return
    fi
    if [ "$sig" = 0 ]; then
        echo "trial $label #$trial: no signal within 3 s ($reason)" >&2
        printf '%s\t%s\tnan\tnan\t%s\t%s\n' "$label" "$trial" \
            "$(awk -v a="$jump" -v b="$done" 'BEGIN{printf "%.3f", (b-a)/1e6}')" "$reason" >>"$rows"
        return
    fi
    awk -v iv="$label" -v t="$trial" -v j="$jump" -v c="$cross" -v d="$done" -v s="$sig" -v r="$reason" \
        'BEGIN { printf "%s\t%s\t%.3f\t%.3f\t%.3f\t%s\n", iv, t, (s-c)/1e6, (s-j)/1e6, (d-j)/1e6, r }' >>"$rows"
}

if [ "$MODE" = cgroup ]; then
    CG=/sys/fs/cgroup/memory/wd-reaction-$$
    mkdir "$CG"
    trap 'stop_spinners; rmdir "$CG" 2>/dev/null; rm -rf "$WORK" "$REQ".json*' EXIT
    # The target alone in the cgroup (sh writes its PID, then execs it).
    ENTER='echo $$ > "$0/cgroup.procs" && exec "$@"'
    in_cgroup() { sh -c "$ENTER" "$CG" "$@"; }
    used=$(in_cgroup "$WORK/target" 300 "$JUMP_MIB" 0 "$FLOOR" "$BASE_MIB" "$CG")
    limit=$(awk -v r="$used" -v c="$CROSS_AT_MIB" -v f="$FLOOR" 'BEGIN {
        printf "%d", (r + c * 1048576) / (1 - f / 100) / 4096 + 1 }')
    limit=$((limit * 4096))
    echo "$limit" >"$CG/memory.limit_in_bytes"
    echo "# machine: $(nproc) cores, kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg); $BUSY CPU spinner(s)" >&2
    echo "# cgroup_memory steady $((used / 1024)) KiB, limit $((limit / 1024)) KiB (floor line $CROSS_AT_MIB MiB above), jump $JUMP_MIB MiB, $TRIALS trials per interval and wake" >&2
    for iv in $INTERVALS; do
        iv_ms=$(ms_of "$iv")
        # Long enough for the watchdog to attach and sample a few times, at most 3 s.
        hold=$(awk -v i="$iv_ms" 'BEGIN { h = 5 * i + 700; if (h > 3000) h = 3000; printf "%d", h }')
        for wake in $WAKES; do
            for trial in $(seq 1 "$TRIALS"); do
                jitter=$(jitter_of "$iv_ms")
                req="$REQ.json"
                rm -f "$req" "$req".*
                # Not through the function: $! must be the target's PID (sh execs it).
                ${PIN:+taskset -c 0} sh -c "$ENTER" "$CG" "$WORK/target" $((hold + jitter)) "$JUMP_MIB" "$limit" "$FLOOR" "$BASE_MIB" "$CG" \
                    >"$WORK/line" &
                target=$!
                # Attached only once it is in the cgroup: a watchdog that looked earlier would arm on the
                # cgroup it left (a target that moves keeps its threshold where it was).
                until grep -q "${CG##*/}" "/proc/$target/cgroup" 2>/dev/null || ! kill -0 "$target" 2>/dev/null; do sleep 0.01; done
                wd=("$WATCHDOG" --interval "$iv" --floor "$FLOOR" --gpu off --no-notify --no-status -q
                    --request-file "$req" --pid "$target")
                [ "$wake" = poll ] && wd=(scripts/bench/ro_cgroupfs.sh "${wd[@]}")
                [ -n "$NICE" ] && wd=(nice -n "$NICE" "${wd[@]}")
                [ -n "$PIN" ] && wd=(taskset -c 1 "${wd[@]}")
                [ -n "$KEEP_SLOW" ] && wd+=(--events "$WORK/events.jsonl")
                rm -f "$WORK/events.jsonl"
                WATCHDOG_LOG=${KEEP_SLOW:+debug} "${wd[@]}" 2>"$WORK/wd.err" &
                watcher=$!
                wait "$target" || true
                wait "$watcher" || true
                record "$iv/$wake" "$trial" "$(cat "$WORK/line")" "$req"
                keep_if_slow "$iv-$wake-$trial"
            done
        done
    done
    INTERVALS=""
else
rss=$("$WORK/target" 0 "$JUMP_MIB" 0 "$FLOOR" "$BASE_MIB")
# The floor line (95% of L) at steady RSS + CROSS_AT_MIB; L in KiB.
limit_kib=$(awk -v r="$rss" -v c="$CROSS_AT_MIB" -v f="$FLOOR" 'BEGIN {
    printf "%d", (r + c * 1048576) / (1 - f / 100) / 1024 + 1 }')
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg); $BUSY CPU spinner(s)" >&2
echo "# steady RSS $((rss / 1024)) KiB, --mem-limit ${limit_kib}KiB (floor line $CROSS_AT_MIB MiB above), jump $JUMP_MIB MiB, $TRIALS trials per interval" >&2

fi
for iv in $INTERVALS; do
    iv_ms=$(ms_of "$iv")
    hold=$(awk -v i="$iv_ms" 'BEGIN { h = 5 * i; if (h < 300) h = 300; printf "%d", h }')
    for trial in $(seq 1 "$TRIALS"); do
        jitter=$(jitter_of "$iv_ms")
        req="$REQ.json"
        rm -f "$req" "$req".*
        line=$("$WATCHDOG" --interval "$iv" --mem-limit "${limit_kib}KiB" --floor "$FLOOR" \
            --gpu off --no-notify --no-status -q --request-file "$req" \
            run -- "$WORK/target" $((hold + jitter)) "$JUMP_MIB" $((limit_kib * 1024)) "$FLOOR" "$BASE_MIB" \
            2>"$WORK/wd.err") || true
        record "$iv" "$trial" "$line" "$req"
    done
done
[ -n "$OUT" ] && cp "$rows" "$OUT"

PYTHONPATH=scripts/bench python3 - "$rows" <<'EOF'
import csv, sys
from stats import quantile
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def pct(v, p):
    return quantile(v, p / 100)
print(f"{'interval':>8} {'trials':>6} {'signalled':>9}   signal - cross (ms): {'min':>7} {'p50':>7} {'p99':>7} {'max':>7}"
      f"   signal - jump start p50/p99 (ms)   jump took p50 (ms)   reasons")
for iv in dict.fromkeys(r["interval"] for r in rows):
    rs = [r for r in rows if r["interval"] == iv]
    ok = [r for r in rs if r["sig_minus_cross_ms"] != "nan"]
    sc = [float(r["sig_minus_cross_ms"]) for r in ok]
    sj = [float(r["sig_minus_jump_ms"]) for r in ok]
    jt = [float(r["jump_ms"]) for r in rs]
    reasons = {}
    for r in rs:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    print(f"{iv:>8} {len(rs):>6} {len(ok):>9}   {'':21}{min(sc, default=float('nan')):7.2f} {pct(sc,50):7.2f} {pct(sc,99):7.2f} {max(sc, default=float('nan')):7.2f}"
          f"   {pct(sj,50):7.2f} / {pct(sj,99):7.2f}{'':18}{pct(jt,50):7.2f}          "
          + ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items())))
EOF
