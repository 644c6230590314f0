#!/usr/bin/env bash
# What `watchdog daemon` costs for 1, 10 and 100 runs, beside one `watchdog --pid` per run.
#
# Each run is a tree of 10 processes (a bash parent named wd-bench-tgt with 9 sleeping
# children). For each count N it measures two set-ups one after the other, on the same
# kind of runs:
#   - daemon: one `watchdog daemon` with one rule (command "wd-bench-tgt"), sampling every
#       100 ms (10 Hz), scanning /proc every 250 ms (the defaults); the runs are started
#       after it, and how long each took to be found is read from its log (the line "rule
#       ... matched PID P" against the moment the script started P);
#   - single: N processes `watchdog --pid P --interval 100ms`, one per run.
# Both watch the same resources per run (host memory, cgroup memory and cache, the tree,
# the filesystems of / and /dev/shm, runtime; GPU off, no notifications). After WARMUP
# seconds it reads the CPU time of the watchdog processes (the sum over their threads of
# /proc/PID/task/TID/schedstat field 1), waits DURATION seconds and reads it again; RSS is
# the sum of VmRSS at the end. The daemon's wake-ups are its main thread's voluntary
# context switches over the window, printed with the load average at the window's start.
#
# MEM_LIMIT=64GiB gives the rule (and the single runs) a mem_limit: each run's tree is then
# walked and its RSS summed every tick instead of every tree_interval (1 s).
#
# STILL_MEMINFO=1 shows the watchdogs a copy of /proc/meminfo taken when each starts
# (bind-mounted in a mount namespace of their own, as overhead.sh does): on a machine
# shared with builds, host memory then stays far and slow, as on a quiet host.
#
# CHURN=1 also runs a loop that starts a short process every 100 ms during the window, as
# on a busy machine: a new PID anywhere makes every watched tree be re-read (an idle
# machine lets the watchdog skip that; see performance.md).
#
# PERF=FILE records the daemon's window with `perf record -F 999 --call-graph dwarf` into FILE.N (N runs;
# the CPU figure then includes perf's own cost in the daemon: compare only within a PERF run).
#
# MODE=fork-exec measures discovery instead (issue 18): 200 runs of `python3 train.py`
# (sleeping 60 s) launched by scripts/bench/fork_exec_launch.py in 20 batches at random
# offsets within 5 s of the daemon's socket appearing, through five fork-then-exec chains
# (python execing python after a 0-300 ms preexec_fn, sh -c exec, a plain Popen, setpriv to
# a user made for the bench, a subshell that sleeps 50 ms then execs), the launcher forking
# around them. For each chain: how many runs the daemon took, and how long after the launch
# (which includes the preexec_fn's sleep) and after train.py's first line its log said so.
# SEED=N repeats a launch plan.
#
# Usage: scripts/bench/daemon.sh     (as root: the daemon reads every user's /proc)
# Env:   COUNTS="1 10 100" DURATION=20 WARMUP=3 CHURN=0 MEM_LIMIT= STILL_MEMINFO=0 PERF= WATCHDOG=target/release/watchdog
#        MODE=fork-exec SEED= PYTHON=/usr/bin/python3
set -euo pipefail

cd "$(dirname "$0")/../.."
COUNTS=${COUNTS:-"1 10 100"}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-3}
CHURN=${CHURN:-0}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
WORK=$(mktemp -d /tmp/wd-daemon-bench.XXXXXX)
PIDS=()

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

clean_up_at_exit

if [ "$(id -u)" != 0 ]; then
    echo "scripts/bench/daemon.sh: run it as root (the daemon reads every user's processes)" >&2
    exit 2
fi
if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi

rss_kib() { # sum of VmRSS of the PIDs given
    for p in "$@"; do awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null; done |
        awk '{s += $1} END {printf "%d\n", s}'
}

stop_runs() { # the runs (process groups) and the watchdogs
    kill_groups "${PIDS[@]:-}"
    wait 2>/dev/null || true
    PIDS=()
}

churn() { # a short process every 100 ms until killed
    while :; do /bin/true; sleep 0.1; done
}

rows="$WORK/rows.tsv"
: >"$rows"

measure() { # $1 = daemon|single, $2 = N; appends "mode N cpu_pct rss_mib" to rows
    local mode=$1 n=$2 life=$((WARMUP + DURATION + 60)) watchers=() started=() i still=()
    if [ "${STILL_MEMINFO:-0}" = 1 ]; then
        cat /proc/meminfo >"$WORK/meminfo"
        # unshare execs sh, which execs the watchdog: $! stays the watchdog's PID.
        still=(unshare -m --propagation private sh -c 'mount --bind "$0" /proc/meminfo && exec "$@"' "$WORK/meminfo")
    fi
    if [ "$mode" = daemon ]; then
        bench_daemon_config "$WORK" bench >"$WORK/daemon.toml"
        mkdir -p "$WORK/state"
        "${still[@]}" "$WATCHDOG" daemon --config "$WORK/daemon.toml" 2>"$WORK/daemon.log" &
        watchers+=("$!")
        PIDS+=("$!")
        for _ in $(seq 100); do [ -S "$WORK/daemon.sock" ] && break; sleep 0.1; done
    fi
    for i in $(seq "$n"); do
        read -r pid t0 < <(start_bench_run "$life")
        PIDS+=("$pid")
        started+=("$pid $t0")
        if [ "$mode" = single ]; then
            "${still[@]}" "$WATCHDOG" --pid "$pid" --interval 100ms --disk / --disk /dev/shm --gpu off ${MEM_LIMIT:+--mem-limit "$MEM_LIMIT"} \
                --no-notify --no-status -q --request-file "$WORK/req-$pid.json" \
                2>>"$WORK/single.err" &
            watchers+=("$!")
            PIDS+=("$!")
        fi
    done
    local ch=""
    if [ "$CHURN" = 1 ]; then
        churn &
        ch=$!
        PIDS+=("$ch")
    fi
    sleep "$WARMUP"
    local c0 c1 v0 v1 load
    load=$(cut -d' ' -f1 /proc/loadavg)
    c0=$(cpu_ns "${watchers[@]}")
    v0=$(vcsw "${watchers[0]}")
    if [ -n "${PERF:-}" ] && [ "$mode" = daemon ]; then
        perf record -F 999 --call-graph dwarf,16384 -o "$PERF.$n" -p "${watchers[0]}" -- sleep "$DURATION" 2>/dev/null >&2
    else
        sleep "$DURATION"
    fi
    c1=$(cpu_ns "${watchers[@]}")
    v1=$(vcsw "${watchers[0]}")
    local rss
    rss=$(rss_kib "${watchers[@]}")
    [ -n "$ch" ] && kill "$ch" 2>/dev/null || true
    local found=""
    if [ "$mode" = daemon ]; then
        printf '%s\n' "${started[@]}" >"$WORK/started.txt"
        found=$(python3 - "$WORK/started.txt" "$WORK/daemon.log" <<'PY'
import re, sys, datetime, statistics
started = {}
for line in open(sys.argv[1]):
    pid, t0 = line.split()
    started[int(pid)] = float(t0)
lat = []
for line in open(sys.argv[2], errors="replace"):
    m = re.match(r"(\S+Z)\s+INFO rule \"bench\" matched PID (\d+) ", line)
    if m and int(m.group(2)) in started:
        t = datetime.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f")
        t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
        lat.append(t - started[int(m.group(2))])
if lat:
    lat.sort()
    print(f"{len(lat)}/{len(started)}\t{statistics.median(lat)*1e3:.0f}\t{lat[-1]*1e3:.0f}")
else:
    print(f"0/{len(started)}\t-\t-")
PY
)
    else
        found="-\t-\t-"
    fi
    awk -v m="$mode" -v n="$n" -v c="$((c1 - c0))" -v d="$DURATION" -v r="$rss" -v f="$found" \
        -v w="$((v1 - v0))" -v l="$load" \
        'BEGIN { printf "%s\t%d\t%.3f\t%.1f\t%s\t%.1f\t%s\n", m, n, c / 1e9 / d * 100, r / 1024, f, w / d, l }' >>"$rows"
    stop_runs
    rm -rf "$WORK/users" "$WORK/state" "$WORK"/req-* "$WORK/daemon.sock"
}

fork_exec() { # MODE=fork-exec: discovery of runs reached through fork-then-exec chains
    local python=${PYTHON:-/usr/bin/python3} seed=${SEED:-$RANDOM} user="wdbench$$" uid
    useradd --no-create-home --user-group --shell /bin/sh --home-dir /nonexistent "$user"
    # shellcheck disable=SC2064 # $user is fixed now
    trap "kill_groups \"\${PIDS[@]:-}\"; sleep 1; userdel $user; rm -rf \"\$WORK\"" EXIT
    uid=$(id -u "$user")
    chmod 755 "$WORK"
    mkdir -m 1777 "$WORK/started"
    cat >"$WORK/train.py" <<'PY'
import os, time
with open(os.path.join(os.path.dirname(__file__), "started", str(os.getpid())), "w") as f:
    f.write(f"{time.time():.6f}")
time.sleep(60)
PY
    { bench_daemon_config "$WORK"; cat <<TOML

[[rule]]
name = "chains"
[rule.match]
command = '^\S*python3\S* \S*/train\.py --run [0-9]+$'
[rule.watch]
gpu = "off"
notify = false
max_runtime = "1h"
TOML
    } >"$WORK/daemon.toml"
    mkdir -p "$WORK/state"
    "$WATCHDOG" daemon --config "$WORK/daemon.toml" 2>"$WORK/daemon.log" &
    PIDS+=("$!")
    for _ in $(seq 100); do [ -S "$WORK/daemon.sock" ] && break; sleep 0.1; done
    setsid "$python" scripts/bench/fork_exec_launch.py "$python" "$WORK/train.py" \
        "$(command -v setpriv)" "$uid" "$uid" "$seed" "$WORK/launched.txt" \
        </dev/null >/dev/null 2>"$WORK/launch.err" &
    PIDS+=("$!")
    for _ in $(seq 600); do grep -qx done "$WORK/launched.txt" 2>/dev/null && break; sleep 0.1; done
    sleep 5
    echo "# MODE=fork-exec SEED=$seed: 200 runs in 20 batches within 5 s; load now: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    PYTHONPATH=scripts/bench python3 - "$WORK/launched.txt" "$WORK/daemon.log" "$WORK/started" <<'PY'
import datetime, os, re, sys
from stats import quantile
launched = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 4:
        launched[int(f[2])] = (f[1], float(f[3]))
found = {}
for line in open(sys.argv[2], errors="replace"):
    m = re.match(r"(\S+Z)\s+INFO rule \"chains\" matched PID (\d+) ", line)
    if m and int(m.group(2)) in launched:
        t = datetime.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f")
        found[int(m.group(2))] = t.replace(tzinfo=datetime.timezone.utc).timestamp()
started = {int(n): float(open(os.path.join(sys.argv[3], n)).read() or "nan")
           for n in os.listdir(sys.argv[3])}
def q(xs, p):
    return f"{quantile(xs, p / 100) * 1e3:.0f}" if xs else "-"
print(f"{'chain':>9} {'found':>7} {'after launch p50/p90/max ms':>28} {'after train.py started p50/max ms':>34}")
for chain in ["preexec", "sh-exec", "plain", "setpriv", "subshell", "all"]:
    pids = [p for p, (c, _) in launched.items() if chain in (c, "all")]
    lat = sorted(found[p] - launched[p][1] for p in pids if p in found)
    run = sorted(found[p] - started[p] for p in pids if p in found and p in started)
    a = f"{q(lat, 50)} / {q(lat, 90)} / {lat[-1] * 1e3:.0f}" if lat else "-"
    b = f"{q(run, 50)} / {run[-1] * 1e3:.0f}" if run else "-"
    print(f"{chain:>9} {len(lat):>3}/{len(pids):<3} {a:>28} {b:>34}")
print("(found: runs the daemon took; after launch: from just before the launcher's Popen to the")
print(" log line; after train.py started: from its first line, negative when found before it)")
PY
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)" >&2
if [ "${MODE:-cost}" = fork-exec ]; then
    fork_exec
    exit 0
fi
echo "# DURATION=${DURATION}s WARMUP=${WARMUP}s CHURN=$CHURN; load at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for n in $COUNTS; do
    measure daemon "$n"
    measure single "$n"
done

python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {(r[0], int(r[1])): r for r in rows}
print(f"{'runs':>5} {'processes':>9} {'daemon CPU %':>12} {'daemon RSS':>11} {'single CPU %':>12} {'single RSS':>11} {'daemon/single':>13} {'found':>7} {'p50 ms':>7} {'max ms':>7} {'wakes/s':>7} {'load':>5}")
for n in sorted({int(r[1]) for r in rows}):
    d, s = by.get(("daemon", n)), by.get(("single", n))
    ratio = float(d[2]) / float(s[2]) if d and s and float(s[2]) > 0 else float("nan")
    print(f"{n:5d} {n*10:9d} {float(d[2]):12.3f} {float(d[3]):7.1f} MiB {float(s[2]):12.3f} {float(s[3]):7.1f} MiB {ratio:13.2f} {d[4]:>7} {d[5]:>7} {d[6]:>7} {d[7]:>7} {d[8]:>5}")
print("(CPU % of one core over the window; RSS summed over the watchdog processes; found: runs the daemon found, and how long after their start;")
print(" wakes/s: the daemon's main thread's voluntary context switches a second over the window; load: the 1-minute load average at its start)")
PY
