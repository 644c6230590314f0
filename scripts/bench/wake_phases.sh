#!/usr/bin/env bash
# Where a wake at rest goes (issue 31): the main thread's CPU time by phase of each wake,
# for the watchdog and for the C floor (rest_floor.c, mode pusmlf: the same reads after a
# poll of 4 descriptors), side by side on one `sleep` in a 4 GiB v1 memory cgroup with host
# memory moving (mem_mover.py), REPEAT windows of DURATION seconds after WARMUP.
#
# The watchdog measured is HEAD with scripts/bench/wake_phases.patch applied (a git
# worktree in a temporary directory, built into target/wake-phases): the patch stamps
# CLOCK_THREAD_CPUTIME_ID around each phase of the loop and writes the sums at every
# wake (the write itself left out of them). It is a measurement, never shipped: the stamps cost about 20 system calls a
# wake, so the watchdog's total here is above what at_rest.sh measures. rest_floor.c is
# built with -DPHASES (two stamps a wake). Refresh the patch when the loop moves
# (`git diff > scripts/bench/wake_phases.patch` in a worktree where it is applied).
#
# Printed per window, in us a wake: the wait (the poll and the code around it), the tree's
# gate (/proc/loadavg, a walk when a process was created), the sources' reads, their
# decisions (Engine::observe), the plan and events after them, the client's files (the
# step reports' and acknowledgment's looks), the chores, decide and act, the thresholds
# and outputs, and what is left of the loop; then the floor's wait and reads, and
# earlyoom --dryrun -r 0 in the same windows (its whole wake, from schedstat).
#
# Usage: scripts/bench/wake_phases.sh      (as root: the cgroup)
# Env:   DURATION=64 WARMUP=8 REPEAT=3
set -euo pipefail

cd "$(dirname "$0")/../.."
DURATION=${DURATION:-64}
WARMUP=${WARMUP:-8}
REPEAT=${REPEAT:-3}
WORK=$(mktemp -d /tmp/wd-phases.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-phases.$$
PIDS=()
REPO=$PWD

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

clean_up_at_exit
trap 'kill_groups "${PIDS[@]:-}"; sleep 0.2; rmdir "$CG" 2>/dev/null || true
      git -C "$REPO" worktree remove --force "$WORK/src" 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ "$(id -u)" = 0 ] || { echo "wake_phases.sh: run as root (a memory cgroup for the target)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "wake_phases.sh: no cgroup v1 memory hierarchy" >&2; exit 2; }
command -v earlyoom >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq earlyoom >/dev/null

git worktree add --detach "$WORK/src" HEAD >/dev/null 2>&1
git -C "$WORK/src" apply "$REPO/scripts/bench/wake_phases.patch"
echo "building the measured watchdog (HEAD with wake_phases.patch) ..." >&2
(cd "$WORK/src" && cargo build --release -q -p watchdog --target-dir "$REPO/target/wake-phases") >&2
WATCHDOG=$REPO/target/wake-phases/release/watchdog
gcc -O2 -DPHASES -o "$WORK/rest_floor" scripts/bench/rest_floor.c

mkdir -p "$CG"
echo $((4 << 30)) >"$CG/memory.limit_in_bytes"
start_mem_mover

# The last line of FILE starting with WORD, as of now.
last_line() { grep "^$2" "$1" | tail -n 1 || true; }

echo "# $(nproc) cores, kernel $(uname -r); DURATION=${DURATION}s WARMUP=${WARMUP}s REPEAT=$REPEAT; $(git rev-parse --short HEAD)" >&2
rows="$WORK/rows"
: >"$rows"
for run in $(seq 1 "$REPEAT"); do
    sleep_in_cgroup "$CG" $((WARMUP + DURATION + 30))
    t=$!
    PIDS+=("$t")
    sleep 0.3
    if [ $((run % 2)) = 1 ]; then
        (cd /tmp && exec "$WATCHDOG" --pid "$t" --no-notify --no-status -q \
            --request-file "$WORK/req.json" 2>"$WORK/wd.err") &
        wd=$!
        "$WORK/rest_floor" "$CG" "$t" pusmlf 2>"$WORK/floor.err" &
        fl=$!
    else
        "$WORK/rest_floor" "$CG" "$t" pusmlf 2>"$WORK/floor.err" &
        fl=$!
        (cd /tmp && exec "$WATCHDOG" --pid "$t" --no-notify --no-status -q \
            --request-file "$WORK/req.json" 2>"$WORK/wd.err") &
        wd=$!
    fi
    earlyoom --dryrun -r 0 >/dev/null 2>&1 &
    eo=$!
    PIDS+=("$wd" "$fl" "$eo")
    sleep "$WARMUP"
    w0=$(last_line "$WORK/wd.err" probe) f0=$(last_line "$WORK/floor.err" phases)
    e0="$(cpu_ns "$eo") $(vcsw "$eo")"
    sleep "$DURATION"
    w1=$(last_line "$WORK/wd.err" probe) f1=$(last_line "$WORK/floor.err" phases)
    e1="$(cpu_ns "$eo") $(vcsw "$eo")"
    printf '%s|%s|%s|%s|%s|%s|%s\n' "$run" "$w0" "$w1" "$f0" "$f1" "$e0" "$e1" >>"$rows"
    kill "$wd" "$fl" "$eo" 2>/dev/null || true
    kill -- "-$t" 2>/dev/null || true
    wait "$wd" "$fl" "$eo" "$t" 2>/dev/null || true
    PIDS=("${PIDS[0]}")
done

python3 - "$rows" <<'PY'
import re, statistics, sys

def nums(line):
    return [int(x) for x in re.findall(r"\d+", line)]

names = ["wait", "tree", "reads", "decisions", "plan", "client", "chores", "decide", "after", "loop", "total"]
table = {n: [] for n in names + ["floor wait", "floor reads", "floor total", "earlyoom"]}
for row in open(sys.argv[1]):
    run, w0, w1, f0, f1, e0, e1 = row.rstrip("\n").split("|")
    if not (w0 and w1 and f0 and f1):
        print(f"window {run}: a tool wrote no phases")
        continue
    a, b = nums(w0), nums(w1)
    d = [y - x for x, y in zip(a, b)]
    n = d[10]
    if n <= 0:
        continue
    us = lambda v: v / n / 1e3
    phase = {
        "wait": us(d[0]),
        "tree": us(d[11]),
        "reads": us(d[3] - d[4]),
        "decisions": us(d[4]),
        "plan": us(d[5] - d[3] - d[11]),
        "client": us(d[6] + d[9]),
        "chores": us(d[2]),
        "decide": us(d[7]),
        "after": us(d[8]),
    }
    total = us(d[15])
    phase["loop"] = total - sum(phase.values())
    phase["total"] = total
    fa, fb = nums(f0), nums(f1)
    fn = fb[0] - fa[0]
    phase["floor wait"] = (fb[1] - fa[1]) / fn / 1e3
    phase["floor reads"] = (fb[2] - fa[2]) / fn / 1e3
    phase["floor total"] = phase["floor wait"] + phase["floor reads"]
    (ec0, ev0), (ec1, ev1) = nums(e0), nums(e1)
    phase["earlyoom"] = (ec1 - ec0) / max(ev1 - ev0, 1) / 1e3
    print(f"window {run} ({n} wakes, floor {fn}): " + ", ".join(f"{k} {v:.1f}" for k, v in phase.items()))
    for k, v in phase.items():
        table[k].append(v)
print(f"{'phase':12} {'us a wake (median)':>20}")
for k, v in table.items():
    if v:
        print(f"{k:12} {statistics.median(v):20.1f}")
PY
