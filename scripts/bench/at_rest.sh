#!/usr/bin/env bash
# At rest as a user runs it (issue 31): `watchdog --pid T --no-notify --no-status -q` with
# every other setting at its default, T a `sleep` in a memory cgroup of its own (cgroup v1,
# 4 GiB limit), beside `earlyoom --dryrun -r 0` (its defaults: it sleeps as long as the free
# memory would last at 6,000 MiB/s, 0.1 to 1 s). REPEAT windows, each on fresh processes:
# start both (the order alternates from one window to the next: the second started pays
# more), wait WARMUP seconds, then measure DURATION seconds of CPU time (schedstat, over all
# threads) and wake-ups (voluntary context switches of the main thread, and of all threads).
#
# MOVING_MEMINFO=1 (the default here; also honoured by overhead.sh): scripts/bench/mem_mover.py
# allocates and frees 1% of host memory every 2 s for the whole run, so host memory moves
# as on a live machine (nothing frozen, nothing bind-mounted).
#
# Usage: scripts/bench/at_rest.sh          (as root: the cgroup, and earlyoom from apt-get)
# Env:   DURATION=60 WARMUP=3 REPEAT=3 WATCHDOG=target/release/watchdog MOVING_MEMINFO=1
#        STRACE=FILE: strace -f -c the watchdog over the last window's DURATION (summary to FILE)
#        OUT=file (raw rows, TSV)
set -euo pipefail

cd "$(dirname "$0")/../.."
DURATION=${DURATION:-60}
WARMUP=${WARMUP:-3}
REPEAT=${REPEAT:-3}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
MOVING_MEMINFO=${MOVING_MEMINFO:-1}
OUT=${OUT:-}
WORK=$(mktemp -d /tmp/wd-rest.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-at-rest.$$
PIDS=()

# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh

clean_up_at_exit
trap 'kill_groups "${PIDS[@]:-}"; sleep 0.2; rmdir "$CG" 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ "$(id -u)" = 0 ] || { echo "at_rest.sh: run as root (a memory cgroup for the target)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "at_rest.sh: no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory" >&2; exit 2; }
if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
if ! command -v earlyoom >/dev/null; then
    echo "installing earlyoom with apt-get ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq earlyoom >/dev/null 2>&1 || true
fi
command -v earlyoom >/dev/null || { echo "at_rest.sh: earlyoom is not installed" >&2; exit 2; }

mkdir -p "$CG"
echo $((4 << 30)) >"$CG/memory.limit_in_bytes"

vcsw_all() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches:/ {s += $2} END {print s + 0}'; }

[ "$MOVING_MEMINFO" = 1 ] && start_mem_mover

rows="$WORK/rows.tsv"
printf 'window\ttool\tcpu_s\tcpu_pct\twakeups_main\twakeups_all\tus_per_wake\tload1\n' >"$rows"
echo "# $(nproc) cores, kernel $(uname -r); DURATION=${DURATION}s WARMUP=${WARMUP}s REPEAT=$REPEAT MOVING_MEMINFO=$MOVING_MEMINFO; $WATCHDOG" >&2
for run in $(seq 1 "$REPEAT"); do
    life=$((WARMUP + DURATION + 30))
    # The target: a sleep in the cgroup (it joins before it execs).
    sleep_in_cgroup "$CG" "$life"
    t=$!
    PIDS+=("$t")
    sleep 0.3
    start_wd() {
        "$WATCHDOG" --pid "$t" --no-notify --no-status -q --request-file "$WORK/req.json" 2>"$WORK/wd.err" &
        wd=$!
    }
    start_eo() {
        earlyoom --dryrun -r 0 >"$WORK/eo.out" 2>&1 &
        eo=$!
    }
    if [ $((run % 2)) = 1 ]; then start_wd; start_eo; first=watchdog; else start_eo; start_wd; first=earlyoom; fi
    PIDS+=("$wd" "$eo")
    sleep "$WARMUP"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    declare -A c0 m0 a0
    for tp in "watchdog:$wd" "earlyoom:$eo"; do
        n=${tp%%:*} p=${tp##*:}
        c0[$n]=$(cpu_ns "$p") m0[$n]=$(vcsw "$p") a0[$n]=$(vcsw_all "$p")
    done
    st=""
    if [ -n "${STRACE:-}" ] && [ "$run" = "$REPEAT" ]; then
        strace -f -c -o "$STRACE" -p "$wd" &
        st=$!
    fi
    sleep "$DURATION"
    [ -n "$st" ] && { kill -INT "$st"; wait "$st" 2>/dev/null || true; }
    for tp in "watchdog:$wd" "earlyoom:$eo"; do
        n=${tp%%:*} p=${tp##*:}
        c1=$(cpu_ns "$p") m1=$(vcsw "$p") a1=$(vcsw_all "$p")
        awk -v r="$run" -v n="$n" -v c="$((c1 - c0[$n]))" -v m="$((m1 - m0[$n]))" \
            -v a="$((a1 - a0[$n]))" -v d="$DURATION" -v l="$load0" 'BEGIN {
                printf "%s\t%s\t%.4f\t%.4f\t%.2f\t%.2f\t%.0f\t%s\n",
                    r, n, c / 1e9, c / 1e9 / d * 100, m / d, a / d, (m > 0 ? c / 1e3 / m : 0), l }' >>"$rows"
    done
    echo "# window $run (started first: $first, load $load0): $(tail -2 "$rows" | tr '\t\n' ' ;')" >&2
    kill "$eo" 2>/dev/null || true
    kill -- "-$t" 2>/dev/null || true
    wait "$wd" 2>/dev/null || true
    wait "$eo" 2>/dev/null || true
    wait "$t" 2>/dev/null || true
    grep -v '^$' "$WORK/wd.err" | tail -3 >&2 || true
    PIDS=("${PIDS[0]:-}")
done

[ -n "$OUT" ] && cp "$rows" "$OUT"

python3 - "$rows" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = {}
for r in rows:
    by.setdefault(r["tool"], []).append(r)
def col(tool, k):
    return [float(r[k]) for r in by.get(tool, [])]
print(f"{'tool':9} {'CPU % (median, min-max)':>26} {'wake-ups/s main (all)':>22} {'us CPU / wake':>14}")
for tool in ("watchdog", "earlyoom"):
    c, m, a, u = col(tool, "cpu_pct"), col(tool, "wakeups_main"), col(tool, "wakeups_all"), col(tool, "us_per_wake")
    if not c:
        continue
    print(f"{tool:9} {statistics.median(c):10.4f} ({min(c):.4f}-{max(c):.4f}) {statistics.median(m):12.2f} ({statistics.median(a):.2f}) {statistics.median(u):14.0f}")
w, e = col("watchdog", "cpu_pct"), col("earlyoom", "cpu_pct")
if w and e and statistics.median(e) > 0:
    print(f"watchdog / earlyoom CPU: {statistics.median(w) / statistics.median(e):.2f}x (medians; per window: "
          + ", ".join(f"{a / b:.2f}x" for a, b in zip(w, e) if b > 0) + ")")
PY
