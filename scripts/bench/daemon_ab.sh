#!/usr/bin/env bash
# Two `watchdog daemon` builds side by side on the same runs: the CPU each costs over the
# same windows, so that the machine's drift (other builds, a VM's neighbours) weighs on both
# alike. A daemon started second pays more than the first here (both read the same /proc
# and cgroup files; the second finds them colder or contended), so run it twice with the
# places swapped and take the geometric mean of the two ratios.
#
# N runs (a bash parent named wd-bench-tgt with 9 sleeping children, as daemon.sh starts
# them) are started first; each daemon has one rule taking them (100 ms interval, 250 ms
# scan, GPU off, / and /dev/shm) and sees a copy of /proc/meminfo taken at the start
# (STILL_MEMINFO=1 of daemon.sh: host memory held still). After WARMUP seconds, REPEAT
# windows of DURATION seconds each print the CPU % of one core of each daemon (the sum over
# its threads of /proc/PID/task/TID/schedstat field 1) and their ratio.
#
# Usage: scripts/bench/daemon_ab.sh OLD NEW     (as root)
#        B=- runs OLD alone.
# Env:   N=100 WARMUP=30 DURATION=30 REPEAT=4
set -euo pipefail

cd "$(dirname "$0")/../.."
A=${1:?usage: scripts/bench/daemon_ab.sh OLD NEW}
B=${2:?usage: scripts/bench/daemon_ab.sh OLD NEW}
N=${N:-100}
WARMUP=${WARMUP:-30}
DURATION=${DURATION:-30}
REPEAT=${REPEAT:-4}
WORK=$(mktemp -d /tmp/wd-daemon-ab.XXXXXX)
PIDS=()

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

# The daemons write their last recordings as they stop: waited for before WORK goes.
trap 'kill_groups "${PIDS[@]:-}"; wait 2>/dev/null; rm -rf "$WORK"' EXIT

cat /proc/meminfo >"$WORK/meminfo"
for _ in $(seq "$N"); do
    read -r pid _ < <(start_bench_run 3600)
    PIDS+=("$pid")
done

start_daemon() { # $1 = binary, $2 = its directory; prints its PID
    mkdir -p "$2/state"
    bench_daemon_config "$2" bench >"$2/daemon.toml"
    # unshare execs sh, which execs the watchdog: $! stays the watchdog's PID.
    unshare -m --propagation private sh -c 'mount --bind "$0" /proc/meminfo && exec "$@"' \
        "$WORK/meminfo" "$1" daemon --config "$2/daemon.toml" >/dev/null 2>"$2/daemon.log" </dev/null &
    echo "$!"
}


pa=$(start_daemon "$A" "$WORK/a")
PIDS+=("$pa")
pb=""
if [ "$B" != - ]; then
    pb=$(start_daemon "$B" "$WORK/b")
    PIDS+=("$pb")
fi
echo "# $N runs; A=$A B=$B; load at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
sleep "$WARMUP"
for _ in $(seq "$REPEAT"); do
    a0=$(cpu_ns "$pa")
    b0=$([ -n "$pb" ] && cpu_ns "$pb" || echo 0)
    sleep "$DURATION"
    a1=$(cpu_ns "$pa")
    b1=$([ -n "$pb" ] && cpu_ns "$pb" || echo 0)
    awk -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v d="$DURATION" 'BEGIN {
        if (b > 0) printf "A %.3f%%  B %.3f%%  B/A %.2f\n", a / d / 1e7, b / d / 1e7, b / a
        else printf "A %.3f%%\n", a / d / 1e7 }'
done
