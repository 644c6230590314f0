#!/usr/bin/env bash
# A wake at rest against its floor (issue 31): in the same windows, on the same `sleep` in a
# 4 GiB v1 memory cgroup, with host memory moving (mem_mover.py):
#   - the watchdog as a user runs it (`--pid T --no-notify --no-status -q`, working
#     directory /tmp: it watches host memory, the cgroup and its page cache, the tree, /tmp
#     and /dev/shm, each read about once every max_interval at rest);
#   - rest_floor.c doing the same reads a wake from descriptors opened once, after a poll
#     of 4 descriptors (`pusmlf`): what those reads cost with no watchdog around them;
#   - rest_floor.c reading /proc/meminfo alone after sleeping 1 s (`-`);
#   - earlyoom --dryrun -r 0 (its default adaptive mode).
# All four run at once, so a wake's price on the machine (a VM's idle exits, the caches
# the others evict) is the same for each; the start order rotates from window to window.
# Printed per window and as medians: wake-ups a second (main thread's voluntary context
# switches) and CPU a wake (schedstat over all threads).
#
# Usage: scripts/bench/rest_floor.sh      (as root: the cgroup; earlyoom and gcc from apt-get)
# Env:   DURATION=60 WARMUP=8 REPEAT=3 WATCHDOG=target/release/watchdog MODES="pusmlf -"
#        VARIANTS="NAME:VAR=VALUE[,VAR=VALUE] ...": more watchdogs in the same windows, each
#          the same binary with those variables in its environment (an A/B of a change gated
#          on a variable; NAME:- for none), printed as watchdog:NAME; WD_BIN=PATH among
#          them runs that binary instead (an A/B of two builds)
set -euo pipefail

cd "$(dirname "$0")/../.."
DURATION=${DURATION:-60}
WARMUP=${WARMUP:-8}
REPEAT=${REPEAT:-3}
WATCHDOG=$(realpath "${WATCHDOG:-target/release/watchdog}")
MODES=${MODES:-pusmlf -}
VARIANTS=${VARIANTS:-}
WORK=$(mktemp -d /tmp/wd-floor.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-rest-floor.$$
PIDS=()

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh
trap 'kill_groups "${PIDS[@]:-}"; sleep 0.2; rmdir "$CG" 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ "$(id -u)" = 0 ] || { echo "rest_floor.sh: run as root (a memory cgroup for the target)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "rest_floor.sh: no cgroup v1 memory hierarchy" >&2; exit 2; }
[ -x "$WATCHDOG" ] || cargo build --release -p watchdog >&2
command -v earlyoom >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq earlyoom >/dev/null
gcc -O2 -o "$WORK/rest_floor" scripts/bench/rest_floor.c

mkdir -p "$CG"
echo $((4 << 30)) >"$CG/memory.limit_in_bytes"

start_mem_mover

rows="$WORK/rows.tsv"
printf 'window\ttool\twakeups_per_s\tus_per_wake\n' >"$rows"
echo "# $(nproc) cores, kernel $(uname -r); DURATION=${DURATION}s WARMUP=${WARMUP}s REPEAT=$REPEAT; $WATCHDOG" >&2
for run in $(seq 1 "$REPEAT"); do
    sleep_in_cgroup "$CG" $((WARMUP + DURATION + 30))
    t=$!
    PIDS+=("$t")
    sleep 0.3
    names=(watchdog)
    declare -A env_of=()
    for v in $VARIANTS; do names+=("watchdog:${v%%:*}"); env_of[watchdog:${v%%:*}]=${v#*:}; done
    for m in $MODES; do names+=("floor:$m"); done
    names+=(earlyoom)
    # Rotate the start order by one each window.
    n=${#names[@]}
    declare -A pid_of=()
    for i in $(seq 0 $((n - 1))); do
        name=${names[$(((i + run - 1) % n))]}
        case $name in
            watchdog) (cd /tmp && exec "$WATCHDOG" --pid "$t" --no-notify --no-status -q \
                --request-file "$WORK/req.json" 2>"$WORK/wd.err") & ;;
            watchdog:*) (cd /tmp && IFS=, read -ra kv <<<"${env_of[$name]}" && [ "${kv[0]}" = - ] || export "${kv[@]}"
                exec "${WD_BIN:-$WATCHDOG}" --pid "$t" --no-notify --no-status -q \
                --request-file "$WORK/req-${name#watchdog:}.json" 2>"$WORK/wd-${name#watchdog:}.err") & ;;
            floor:*) "$WORK/rest_floor" "$CG" "$t" "${name#floor:}" & ;;
            earlyoom) earlyoom --dryrun -r 0 >/dev/null 2>&1 & ;;
        esac
        pid_of[$name]=$!
        PIDS+=("$!")
    done
    sleep "$WARMUP"
    declare -A c0=() v0=()
    for name in "${names[@]}"; do c0[$name]=$(cpu_ns "${pid_of[$name]}"); v0[$name]=$(vcsw "${pid_of[$name]}"); done
    sleep "$DURATION"
    for name in "${names[@]}"; do
        p=${pid_of[$name]}
        c=$(($(cpu_ns "$p") - c0[$name])) v=$(($(vcsw "$p") - v0[$name]))
        awk -v r="$run" -v n="$name" -v c="$c" -v v="$v" -v d="$DURATION" \
            'BEGIN { printf "%s\t%s\t%.2f\t%.0f\n", r, n, v / d, (v > 0 ? c / 1e3 / v : 0) }' >>"$rows"
    done
    echo "# window $run: $(awk -F'\t' -v r="$run" '$1 == r {printf "%s %s/s %s us; ", $2, $3, $4}' "$rows")" >&2
    for name in "${names[@]}"; do kill "${pid_of[$name]}" 2>/dev/null || true; done
    kill -- "-$t" 2>/dev/null || true
    for name in "${names[@]}"; do wait "${pid_of[$name]}" 2>/dev/null || true; done
    wait "$t" 2>/dev/null || true
    PIDS=("${PIDS[0]}")
done

python3 - "$rows" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
tools = list(dict.fromkeys(r["tool"] for r in rows))
med = {t: statistics.median(float(r["us_per_wake"]) for r in rows if r["tool"] == t) for t in tools}
print(f"{'tool':14} {'wake-ups/s':>10} {'us a wake (median, per window)':>40}")
for t in tools:
    per = [r for r in rows if r["tool"] == t]
    w = statistics.median(float(r["wakeups_per_s"]) for r in per)
    print(f"{t:14} {w:10.2f} {med[t]:8.0f}   ({', '.join(r['us_per_wake'] for r in per)})")
if "earlyoom" in med and med["earlyoom"] > 0:
    print("a wake against earlyoom's: " + ", ".join(f"{t} {med[t] / med['earlyoom']:.2f}x" for t in tools if t != "earlyoom"))
PY
