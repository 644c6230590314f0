#!/usr/bin/env bash
# The race against the OOM killer: a run leaking at RATE_MBS MB/s in a LIMIT_MIB cgroup from
# START_PERCENT of it; does its checkpoint request come before the OOM kill, and how long
# before? (root, cgroup v1.)
#
# Each trial: a fresh python3 process in a fresh v1 memory cgroup (memory and memory+swap
# limited to LIMIT_MIB) touches START_PERCENT of the limit, holds HOLD_S (the watchdog
# attaches with `--pid` from outside the cgroup and samples it), then touches RATE_MBS MB/s
# in 5 MiB chunks until the OOM killer ends it (the checkpoint signal is ignored: the race is
# what is measured). Per WAKE: `kernel` lets the watchdog arm its v1 usage threshold, `poll`
# runs it where cgroupfs is read-only (a private mount namespace), so it can only poll.
# "before" counts trials whose `alert` event came before the `exit` event of an OOM-killed
# run; the margin is the time between the two events (wall clock, milliseconds).
#
# Usage: scripts/bench/oom_race.sh      (~20 s a trial)
# Env:   TRIALS=20 WAKES="kernel poll" INTERVAL=100ms LIMIT_MIB=1024 START_PERCENT=40
#        RATE_MBS=500 HOLD_S=3 WATCHDOG=target/release/watchdog
set -euo pipefail

cd "$(dirname "$0")/../.."
TRIALS=${TRIALS:-20}
WAKES=${WAKES:-"kernel poll"}
INTERVAL=${INTERVAL:-100ms}
LIMIT_MIB=${LIMIT_MIB:-1024}
START_PERCENT=${START_PERCENT:-40}
RATE_MBS=${RATE_MBS:-500}
HOLD_S=${HOLD_S:-3}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
WORK=$(mktemp -d /tmp/wd-oomrace.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-oomrace-$$
trap 'rmdir "$CG" 2>/dev/null; rm -rf "$WORK"' EXIT

if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
echo "# machine: $(nproc) cores, kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# $RATE_MBS MB/s from $START_PERCENT% of a $LIMIT_MIB MiB cgroup, --interval $INTERVAL, $TRIALS trials per wake" >&2

cat >"$WORK/leak.py" <<'PY'
import signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
start, rate, hold = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
base = b"x" * start
time.sleep(hold)
chunk, held, n = 5 << 20, [], 0
t0 = time.monotonic()
while True:
    held.append(b"x" * chunk)
    n += 1
    dt = t0 + n * chunk / (rate * 1e6) - time.monotonic()
    if dt > 0:
        time.sleep(dt)
PY

oom_kills() { awk '$1 == "oom_kill" { print $2 }' "$CG/memory.oom_control"; }

printf 'wake\ttrial\toom_killed\tbefore\tmargin_ms\n' >"$WORK/rows.tsv"
for wake in $WAKES; do
    for trial in $(seq 1 "$TRIALS"); do
        mkdir "$CG"
        limit=$((LIMIT_MIB << 20))
        echo "$limit" >"$CG/memory.limit_in_bytes"
        [ -e "$CG/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$CG/memory.memsw.limit_in_bytes"
        before_kills=$(oom_kills)
        ev="$WORK/events.jsonl"
        rm -f "$ev" "$WORK"/req.json*
        sh -c 'echo $$ > "$0/cgroup.procs" && exec python3 "$@"' "$CG" "$WORK/leak.py" \
            $((limit * START_PERCENT / 100)) "$RATE_MBS" "$HOLD_S" &
        target=$!
        # Attached only once it is in the cgroup: a watchdog that looked earlier would arm on the
        # cgroup it left (a target that moves keeps its threshold where it was).
        until grep -q "${CG##*/}" "/proc/$target/cgroup" 2>/dev/null || ! kill -0 "$target" 2>/dev/null; do sleep 0.01; done
        wd=("$WATCHDOG" --interval "$INTERVAL" --gpu off --no-notify --no-status -q
            --events "$ev" --request-file "$WORK/req.json" --pid "$target")
        [ "$wake" = poll ] && wd=(scripts/bench/ro_cgroupfs.sh "${wd[@]}")
        "${wd[@]}" 2>"$WORK/wd.err" &
        watcher=$!
        wait "$target" || true
        wait "$watcher" || true
        killed=$(($(oom_kills) - before_kills))
        python3 - "$ev" "$wake" "$trial" "$killed" >>"$WORK/rows.tsv" <<'PY'
import datetime, json, sys
ev, wake, trial, killed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
events = [json.loads(l) for l in open(ev)]
def at(e):
    return datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
alerts = [at(e) for e in events if e["event"] == "alert" and e.get("resource") == "cgroup_memory"]
exits = [at(e) for e in events if e["event"] == "exit"]
before = bool(killed and alerts and exits and alerts[0] <= exits[0])
margin = (exits[0] - alerts[0]) * 1000 if before else float("nan")
print(f"{wake}\t{trial}\t{killed > 0}\t{before}\t{margin:.0f}")
PY
        rmdir "$CG" 2>/dev/null || { sleep 1; rmdir "$CG"; }
    done
done

python3 - "$WORK/rows.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for wake in dict.fromkeys(r["wake"] for r in rows):
    rs = [r for r in rows if r["wake"] == wake]
    killed = sum(r["oom_killed"] == "True" for r in rs)
    before = [float(r["margin_ms"]) for r in rs if r["before"] == "True"]
    med = statistics.median(before) if before else float("nan")
    low = min(before) if before else float("nan")
    print(f"{wake:>7}: request before the OOM kill in {len(before)} of {len(rs)} trials "
          f"({killed} OOM-killed); margin p50 {med:.0f} ms, min {low:.0f} ms")
PY
