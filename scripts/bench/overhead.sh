#!/usr/bin/env bash
# Whole-process cost of watchdog against what people run instead, side by side.
#
# For each target (idle: `sleep`; busy: scripts/bench/busy_target.py, a 10-process tree
# that allocates, frees and replaces a worker every 2 s) and each rate (10 Hz, 100 Hz,
# 1 kHz), this starts on the SAME target at the SAME time:
#   - watchdog --pid T --interval I --disk / --disk /dev/shm --mem-limit 64GiB
#       --gpu off --no-notify --no-status   (host memory, cgroup, tree, 2 filesystems, runtime)
#   - scripts/bench/psutil_watcher.py at the same rate (host memory, cgroup file, tree RSS
#       with children, 2 disk_usage calls)
#   - scripts/bench/floor_loop.c (compiled here with cc): a minimal C loop making the same
#       system calls per tick and nothing else, the floor the watchdog is compared with
#   - at 10 Hz only: earlyoom --dryrun -r 0, its threshold set ~500 MiB below the current
#       MemAvailable so that it sleeps its minimum 100 ms (see shared/notes/measurements.md);
#       earlyoom has no rate option.
# After WARMUP seconds it reads each process's CPU time, waits DURATION seconds, reads it
# again, and reads the peak RSS (VmHWM). CPU time is the sum over the process's threads of
# /proc/PID/task/TID/schedstat field 1 (nanoseconds on CPU; /proc/PID/stat utime+stime
# counts in 10 ms ticks, too coarse for 0.1% of a core over 20 s, and is printed beside it).
# Wake-ups are the main thread's voluntary context switches over the window (each sleep
# to a deadline is one), to compare with the rate asked for.
#
# Usage: scripts/bench/overhead.sh            (as root, for apt-get/pip; ~2.5 minutes)
# Env:   DURATION=20 WARMUP=2 RATES="10 100 1000" TARGETS="idle busy" REPEAT=1
#        WATCHDOG=target/release/watchdog  EARLYOOM=1 (0 to skip)  OUT=file (raw rows, TSV)
#        EARLYOOM_DEFAULT=1: earlyoom in its default mode (its own thresholds and sleep)
#        STILL_MEMINFO=1: the watchdog sees a copy of /proc/meminfo taken at its start
#          (bind-mounted in a mount namespace of its own): on a machine shared with builds,
#          other processes starting keep host memory moving and so sampled fast; this
#          measures the loop at rest as on a quiet host. Everything else it reads is live.
#        WATCHDOG_ARGS="--max-interval 10ms": more flags for the watchdog (this one keeps
#          every resource at the rate asked, as the C floor loop is: the cost of a tick
#          rather than of the adaptive rates)
#        MOVING_MEMINFO=1: the opposite, host memory moving as on a live machine: for the
#          whole run scripts/bench/mem_mover.py allocates and frees 1% of host memory every
#          2 s (nothing frozen, nothing bind-mounted). scripts/bench/at_rest.sh measures one
#          watchdog at its defaults against earlyoom this way.
set -euo pipefail

cd "$(dirname "$0")/../.."
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-2}
RATES=${RATES:-"10 100 1000"}
TARGETS=${TARGETS:-"idle busy"}
REPEAT=${REPEAT:-1}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
EARLYOOM=${EARLYOOM:-1}
OUT=${OUT:-}
HZ_TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/wd-overhead.XXXXXX)
PIDS=()

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

clean_up_at_exit

# --- prerequisites --------------------------------------------------------------------
if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
if ! python3 -c 'import psutil' 2>/dev/null; then
    echo "installing psutil with pip ..." >&2
    python3 -m pip install --quiet psutil >&2
fi
if [ "$EARLYOOM" = 1 ] && ! command -v earlyoom >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing earlyoom with apt-get ..." >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq earlyoom >/dev/null 2>&1 || true
    fi
    command -v earlyoom >/dev/null || { echo "earlyoom is not installed (not root, or apt-get failed): skipping it" >&2; EARLYOOM=0; }
fi

if [ "${MOVING_MEMINFO:-0}" = 1 ]; then
    setsid python3 scripts/bench/mem_mover.py >/dev/null 2>&1 &
    MOVER=$!
    trap 'kill_groups "${PIDS[@]:-}" "$MOVER"; rm -rf "$WORK"' EXIT
fi

FLOOR=0
if command -v cc >/dev/null && cc -O2 -o "$WORK/floor_loop" scripts/bench/floor_loop.c 2>/dev/null; then
    FLOOR=1
else
    echo "cannot compile scripts/bench/floor_loop.c with cc: skipping the C floor" >&2
fi

# --- measurement helpers ----------------------------------------------------------------
stat_ticks() { # utime + stime in clock ticks (whole process)
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$1"/stat 2>/dev/null || echo 0
}
hwm_kib() { awk '/^VmHWM:/ {print $2}' /proc/"$1"/status 2>/dev/null || echo 0; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

start_target() { # $1 = idle|busy, $2 = seconds; prints the PID (a process-group leader)
    if [ "$1" = idle ]; then
        setsid sleep "$2" >/dev/null 2>&1 &
    else
        setsid python3 scripts/bench/busy_target.py "$2" 10 >/dev/null 2>&1 &
    fi
    echo $!
}

rows="$WORK/rows.tsv"
printf 'target\trate_hz\trun\ttool\tcpu_s\tcpu_pct\tstat_s\tpeak_rss_kib\twakeups_per_s\tload1\n' >"$rows"

measure_once() { # $1 target kind, $2 rate, $3 run number
    local kind=$1 hz=$2 run=$3
    local interval_us=$((1000000 / hz))
    local life=$((WARMUP + DURATION + 30))
    local t wd ps eo=""
    t=$(start_target "$kind" "$life")
    PIDS+=("$t")
    sleep 0.5 # the busy target forks its workers
    local still=()
    if [ "${STILL_MEMINFO:-0}" = 1 ]; then
        cat /proc/meminfo >"$WORK/meminfo"
        # unshare execs sh, which execs the watchdog: $! stays the watchdog's PID.
        still=(unshare -m --propagation private sh -c 'mount --bind "$0" /proc/meminfo && exec "$@"' "$WORK/meminfo")
    fi
    "${still[@]}" "$WATCHDOG" --pid "$t" --interval "${interval_us}us" --disk / --disk /dev/shm \
        --mem-limit 64GiB --gpu off --no-notify --no-status -q \
        --request-file "$WORK/req.json" ${WATCHDOG_ARGS:-} 2>"$WORK/wd.err" &
    wd=$!
    python3 scripts/bench/psutil_watcher.py --pid "$t" --hz "$hz" --disk / --disk /dev/shm \
        2>"$WORK/ps.err" &
    ps=$!
    local fl=""
    if [ "$FLOOR" = 1 ]; then
        "$WORK/floor_loop" "$t" "$hz" / /dev/shm 2>"$WORK/fl.err" &
        fl=$!
    fi
    if [ "$hz" = 10 ] && [ "$EARLYOOM" = 1 ]; then
        local avail
        avail=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
        if [ "${EARLYOOM_DEFAULT:-0}" = 1 ]; then
            # Its default mode: thresholds and adaptive sleep (100 ms to 1 s by headroom).
            earlyoom -r 0 --dryrun >"$WORK/eo.out" 2>&1 &
        else
            earlyoom -r 0 --dryrun -M $((avail - 512000)) >"$WORK/eo.out" 2>&1 &
        fi
        eo=$!
    fi
    PIDS+=("$wd" "$ps" "$eo" "$fl")
    sleep "$WARMUP"
    local tools=("watchdog:$wd" "psutil:$ps")
    [ -n "$fl" ] && tools+=("c-floor:$fl")
    [ -n "$eo" ] && tools+=("earlyoom:$eo")
    local -A c0 s0 v0
    local load0 tp name pid
    load0=$(loadavg)
    for tp in "${tools[@]}"; do
        name=${tp%%:*} pid=${tp##*:}
        c0[$name]=$(cpu_ns "$pid") s0[$name]=$(stat_ticks "$pid") v0[$name]=$(vcsw "$pid")
    done
    sleep "$DURATION"
    for tp in "${tools[@]}"; do
        name=${tp%%:*} pid=${tp##*:}
        local c1 s1 v1 h
        c1=$(cpu_ns "$pid") s1=$(stat_ticks "$pid") v1=$(vcsw "$pid") h=$(hwm_kib "$pid")
        awk -v k="$kind" -v hz="$hz" -v r="$run" -v n="$name" -v c="$((c1 - c0[$name]))" \
            -v s="$((s1 - s0[$name]))" -v tk="$HZ_TICKS" -v h="$h" -v v="$((v1 - v0[$name]))" \
            -v d="$DURATION" -v l="$load0" 'BEGIN {
                printf "%s\t%s\t%s\t%s\t%.4f\t%.3f\t%.2f\t%d\t%.1f\t%s\n",
                    k, hz, r, n, c / 1e9, c / 1e9 / d * 100, s / tk, h, v / d, l }' >>"$rows"
    done
    # End: the target's exit ends the watchdog, which prints its summary (late ticks).
    kill "$ps" 2>/dev/null || true
    [ -n "$eo" ] && kill "$eo" 2>/dev/null || true
    kill -- "-$t" 2>/dev/null || true
    wait "$wd" 2>/dev/null || true
    wait "$ps" 2>/dev/null || true
    [ -n "$fl" ] && { wait "$fl" 2>/dev/null || true; }
    [ -n "$eo" ] && { wait "$eo" 2>/dev/null || true; }
    wait "$t" 2>/dev/null || true
    local late
    late=$(grep -o '[0-9]* of [0-9]* ticks ran late' "$WORK/wd.err" || echo "0 ticks ran late")
    echo "# $kind ${hz} Hz run $run: watchdog: $late; $(tail -1 "$WORK/ps.err" 2>/dev/null); $(tail -1 "$WORK/fl.err" 2>/dev/null)" >&2
    PIDS=()
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)" >&2
echo "# DURATION=${DURATION}s WARMUP=${WARMUP}s REPEAT=$REPEAT; other load at start: loadavg $(cat /proc/loadavg | cut -d' ' -f1-3), cargo $(pgrep -c cargo || true), rustc $(pgrep -c rustc || true)" >&2
for kind in $TARGETS; do
    for hz in $RATES; do
        for run in $(seq 1 "$REPEAT"); do
            measure_once "$kind" "$hz" "$run"
        done
    done
done

[ -n "$OUT" ] && cp "$rows" "$OUT"

# --- the table: medians over runs -------------------------------------------------------
python3 - "$rows" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = {}
for r in rows:
    groups.setdefault((r["target"], int(r["rate_hz"]), r["tool"]), []).append(r)
def med(rs, k):
    return statistics.median(float(r[k]) for r in rs)
def spread(rs, k):
    v = sorted(float(r[k]) for r in rs)
    return f"{v[0]:.3f}-{v[-1]:.3f}" if len(v) > 1 else ""
print(f"{'target':6} {'rate':>7} {'tool':9} {'CPU s':>8} {'CPU %':>7} {'(min-max %)':>13} {'peak RSS':>10} {'wakeups/s':>9}  {'wd/psutil':>9} {'wd/earlyoom':>11} {'wd/c-floor':>10} {'load':>9}")
for (kind, hz, tool) in sorted(groups, key=lambda g: (g[0], g[1], ["watchdog", "psutil", "earlyoom", "c-floor"].index(g[2]))):
    rs = groups[(kind, hz, tool)]
    line = (f"{kind:6} {str(hz)+' Hz':>7} {tool:9} {med(rs,'cpu_s'):8.3f} {med(rs,'cpu_pct'):7.3f} "
            f"{spread(rs,'cpu_pct'):>13} {med(rs,'peak_rss_kib')/1024:7.1f} MiB {med(rs,'wakeups_per_s'):9.1f}")
    if tool == "watchdog":
        wd = med(rs, "cpu_s")
        ps = groups.get((kind, hz, "psutil"))
        eo = groups.get((kind, hz, "earlyoom"))
        line += f"  {wd/med(ps,'cpu_s'):9.3f}" if ps and med(ps, "cpu_s") > 0 else f"  {'-':>9}"
        line += f" {wd/med(eo,'cpu_s'):11.2f}" if eo and med(eo, "cpu_s") > 0 else f" {'-':>11}"
        fl = groups.get((kind, hz, "c-floor"))
        line += f" {wd/med(fl,'cpu_s'):10.2f}" if fl and med(fl, "cpu_s") > 0 else f" {'-':>10}"
        loads = sorted(float(r["load1"]) for r in rs)
        line += f" {loads[0]:.2f}-{loads[-1]:.2f}"
    print(line)
print("(CPU over the measured window; ratios are watchdog CPU / other CPU, medians over runs;")
print(" load: the 1-minute load average at the window's start, lowest-highest over the runs)")
EOF
