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
# The request file (written, fsynced and renamed before the signal is sent) goes to REQ_DIR,
# /dev/shm by default, where XDG_RUNTIME_DIR would put it; REQ_DIR=/tmp puts it on a disk.
#
# Usage: scripts/bench/reaction.sh        (~2 minutes)
# Env:   TRIALS=50 REQ_DIR=/dev/shm INTERVALS="10ms 100ms" JUMP_MIB=200 BASE_MIB=48 CROSS_AT_MIB=8
#        WATCHDOG=target/release/watchdog  OUT=file (raw rows, TSV)
set -euo pipefail

cd "$(dirname "$0")/../.."
TRIALS=${TRIALS:-50}
INTERVALS=${INTERVALS:-"10ms 100ms"}
JUMP_MIB=${JUMP_MIB:-200}
BASE_MIB=${BASE_MIB:-48}
CROSS_AT_MIB=${CROSS_AT_MIB:-8}
FLOOR=5
WATCHDOG=${WATCHDOG:-target/release/watchdog}
OUT=${OUT:-}
WORK=$(mktemp -d /tmp/wd-reaction.XXXXXX)
REQ_DIR=${REQ_DIR:-/dev/shm}
REQ=$(mktemp -u "$REQ_DIR/wd-reaction-req.XXXXXX")
trap 'rm -rf "$WORK" "$REQ".json*' EXIT

if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
cc -O2 -Wall -o "$WORK/target" scripts/bench/reaction_target.c

rss=$("$WORK/target" 0 "$JUMP_MIB" 0 "$FLOOR" "$BASE_MIB")
# The floor line (95% of L) at steady RSS + CROSS_AT_MIB; L in KiB.
limit_kib=$(awk -v r="$rss" -v c="$CROSS_AT_MIB" -v f="$FLOOR" 'BEGIN {
    printf "%d", (r + c * 1048576) / (1 - f / 100) / 1024 + 1 }')
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# steady RSS $((rss / 1024)) KiB, --mem-limit ${limit_kib}KiB (floor line $CROSS_AT_MIB MiB above), jump $JUMP_MIB MiB, $TRIALS trials per interval" >&2

rows="$WORK/rows.tsv"
printf 'interval\ttrial\tsig_minus_cross_ms\tsig_minus_jump_ms\tjump_ms\treason\n' >"$rows"
for iv in $INTERVALS; do
    iv_ms=$(awk -v s="$iv" 'BEGIN { v = s + 0; if (s ~ /us$/) v /= 1000; else if (s ~ /s$/ && s !~ /ms$/) v *= 1000; print v }')
    hold=$(awk -v i="$iv_ms" 'BEGIN { h = 5 * i; if (h < 300) h = 300; printf "%d", h }')
    for trial in $(seq 1 "$TRIALS"); do
        # A random phase between the watchdog's ticks and the jump, in whole milliseconds.
        jitter=$((RANDOM % $(awk -v i="$iv_ms" 'BEGIN { j = int(i); print (j < 1 ? 1 : j) }')))
        req="$REQ.json"
        rm -f "$req" "$req".*
        line=$("$WATCHDOG" --interval "$iv" --mem-limit "${limit_kib}KiB" --floor "$FLOOR" \
            --gpu off --no-notify --no-status -q --request-file "$req" \
            run -- "$WORK/target" $((hold + jitter)) "$JUMP_MIB" $((limit_kib * 1024)) "$FLOOR" "$BASE_MIB" \
            2>"$WORK/wd.err") || true
        reason=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["resource"]+":"+d["reason"])' "$req" 2>/dev/null || echo none)
        read -r jump cross done sig <<<"$line" || true
        if [ "${jump:-error}" = error ] || [ -z "${sig:-}" ]; then
            echo "trial $iv #$trial failed: $line $(tail -2 "$WORK/wd.err")" >&2
            continue
        fi
        if [ "$sig" = 0 ]; then
            echo "trial $iv #$trial: no signal within 3 s ($reason)" >&2
            printf '%s\t%s\tnan\tnan\t%s\t%s\n' "$iv" "$trial" \
                "$(awk -v a="$jump" -v b="$done" 'BEGIN{printf "%.3f", (b-a)/1e6}')" "$reason" >>"$rows"
            continue
        fi
        awk -v iv="$iv" -v t="$trial" -v j="$jump" -v c="$cross" -v d="$done" -v s="$sig" -v r="$reason" \
            'BEGIN { printf "%s\t%s\t%.3f\t%.3f\t%.3f\t%s\n", iv, t, (s-c)/1e6, (s-j)/1e6, (d-j)/1e6, r }' >>"$rows"
    done
done
[ -n "$OUT" ] && cp "$rows" "$OUT"

python3 - "$rows" <<'EOF'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)
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
