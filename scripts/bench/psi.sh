#!/usr/bin/env bash
# PSI firing, measured (root, cgroup v1): how soon after a memory stall starts the trigger the
# watchdog arms (`PsiSpec::DEFAULT`, `some 200000 2000000` on /proc/pressure/memory) fires,
# and how often a release `watchdog --pid` is woken by it.
#
# The stall: a python3 process alone in a fresh v1 memory cgroup of LIMIT_MIB reads a
# FILE_MIB file on disk through mmap, page by page, over and over. The file does not fit, so
# each pass reclaims the cgroup's page cache and faults the file in again: its task stalls in
# memcg reclaim and on refaults of pages it used, which the kernel counts as `some` memory
# stall in /proc/pressure/memory (there is no swap here, so anonymous memory would only end
# in the OOM killer). The file is written from outside the cgroup and dropped from the page
# cache (posix_fadvise DONTNEED) before each start.
#
# (a) TRIALS trials per ARMS: a small python3 tool arms the same trigger as the watchdog (the
# line with its trailing NUL) and polls it for POLLPRI while it runs a fresh thrasher, which
# says when its cgroup's memory.failcnt first grew: the limit was hit, reclaim (the stall)
# began. `fresh` arms a new trigger before each trial, as a watchdog starting then would;
# `kept` keeps one over the trials, as a running watchdog does (its first fire, a warm-up
# trial, is left out). The table gives the fire time from the limit hit and from the
# thrasher's start, and the `some` stall /proc/pressure/memory counted from the start to the
# fire. `total=` is read only then: the kernel weights each CPU's stall by its non-idle time
# in whole jiffies, so a reader every few milliseconds makes it (and the triggers' growth)
# lose most of the stall. The thrasher is stopped at the fire (or after HOLD_S); the next
# trial waits at least QUIET_S and until `total` grew less than 5 ms in a second.
# (a') SMALL_TRIALS thrashes of SMALL_S (tens of ms of stall, far under the 200 ms threshold),
# each seen by a trigger armed just before it and by one kept since a first fire.
# (b) One run of DURATION_S: the thrasher is watched by `watchdog --pid` (interval INTERVAL,
# `--events`), under `strace -f -ttt -T -e trace=poll,ppoll`, beside the tool logging each fire
# of its own trigger. Nothing the watchdog writes (events, summary, log) tells a PSI wake-up
# from a tick, so the wake-ups are counted from strace: the loop's poll returning POLLPRI on
# the descriptor open on /proc/pressure/memory. strace slows each system call; it counts.
#
# Usage: scripts/bench/psi.sh          (~4 minutes)
# Env:   ARMS="fresh kept" TRIALS=20 LIMIT_MIB=64 FILE_MIB=256 HOLD_S=8 QUIET_S=4 DURATION_S=60
#        SMALL_TRIALS=5 SMALL_S=0.15
#        INTERVAL=100ms WATCHDOG=target/release/watchdog  OUT=file (raw rows of (a), TSV)
set -euo pipefail

cd "$(dirname "$0")/../.."
TRIALS=${TRIALS:-20}
LIMIT_MIB=${LIMIT_MIB:-64}
FILE_MIB=${FILE_MIB:-256}
HOLD_S=${HOLD_S:-8}
QUIET_S=${QUIET_S:-4}
DURATION_S=${DURATION_S:-60}
INTERVAL=${INTERVAL:-100ms}
WATCHDOG=${WATCHDOG:-target/release/watchdog}
OUT=${OUT:-}
ARMS=${ARMS:-"fresh kept"}
SMALL_TRIALS=${SMALL_TRIALS:-5}
SMALL_S=${SMALL_S:-0.15}
# On disk, not tmpfs: tmpfs pages cannot be reclaimed without swap.
WORK=$(mktemp -d /var/tmp/wd-psi.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-psi-$$
PIDS=()
# shellcheck source=scripts/bench/lib.sh
. scripts/bench/lib.sh
trap 'kill_groups "${PIDS[@]:-}"; sleep 0.2; rmdir "$CG" 2>/dev/null; rm -rf "$WORK"' EXIT

[ -e /proc/pressure/memory ] || { echo "psi.sh: no /proc/pressure/memory (CONFIG_PSI off, or psi=0)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "psi.sh: no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory" >&2; exit 2; }
if [ ! -x "$WATCHDOG" ]; then
    echo "building $WATCHDOG ..." >&2
    cargo build --release -p watchdog >&2
fi
cap=$(awk '/^CapEff/ { print $2 }' /proc/self/status)
sys_resource=$(( (16#$cap >> 24) & 1 ))
echo "# machine: $(nproc) cores, kernel $(uname -r); loadavg $(cut -d' ' -f1-3 /proc/loadavg); CAP_SYS_RESOURCE in CapEff: $sys_resource" >&2
echo "# a $FILE_MIB MiB file read over and over in a $LIMIT_MIB MiB cgroup; $TRIALS trials, then $DURATION_S s under watchdog --interval $INTERVAL" >&2

mkdir "$CG"
echo $((LIMIT_MIB << 20)) >"$CG/memory.limit_in_bytes"
head -c $((FILE_MIB << 20)) /dev/urandom >"$WORK/file"
sync

cat >"$WORK/thrash.py" <<'PY'
# Reads PATH through mmap a page at a time, over and over, for SECONDS. First drops PATH from
# the page cache and zeroes the memory.failcnt of its cgroup CG, prints "go", then "limit T"
# (CLOCK_MONOTONIC) once failcnt is above zero: a charge hit the limit, so reclaim began
# (failcnt is read once per MiB).
import mmap, os, signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
path, seconds, cg = sys.argv[1], float(sys.argv[2]), sys.argv[3]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
failcnt = os.open(os.path.join(cg, "memory.failcnt"), os.O_RDWR)
os.write(failcnt, b"0")
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
print("go", flush=True)
hit = False
end = time.monotonic() + seconds
while time.monotonic() < end:
    for off in range(0, size, 4096):
        m[off]
        if not hit and off & 0xFFFFF == 0 and int(os.pread(failcnt, 32, 0)) > 0:
            hit = True
            print(f"limit {time.monotonic():.6f}", flush=True)
PY

cat >"$WORK/psi_fire.py" <<'PY'
# The watchdog's PSI trigger, armed and polled: `trials N ...` measures fire times against a
# thrasher it starts; `log SECONDS` prints the wall-clock time of each fire.
import os, select, subprocess, sys, time

# PsiSpec::DEFAULT's line, NUL-terminated as PsiTrigger::arm writes it.
LINE = b"some 200000 2000000\0"
PRESSURE = "/proc/pressure/memory"

def arm():
    fd = os.open(PRESSURE, os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, LINE)
    return fd

# Read rarely: the kernel weights each CPU's stall by its non-idle time in whole jiffies, so a
# reader every few milliseconds makes `total` (and the trigger's growth) lose most stall.
READ = os.open(PRESSURE, os.O_RDONLY)
def some_total_us():
    first = os.pread(READ, 256, 0).split(b"\n", 1)[0]
    return int(first.rsplit(b"total=", 1)[1])

def fired(trigger, timeout_ms):
    p = select.poll()
    p.register(trigger, select.POLLPRI)
    for _, ev in p.poll(timeout_ms):
        if ev & (select.POLLERR | select.POLLNVAL):
            sys.exit("psi_fire: the trigger is gone (POLLERR)")
        if ev & select.POLLPRI:
            return True
    return False

def quiet(trigger, at_least_s):
    # At least AT_LEAST_S, and until `total` grew under 5 ms in a second; drops any fire.
    start, last = time.monotonic(), some_total_us()
    while True:
        fired(trigger, 1000)
        now = some_total_us()
        if time.monotonic() - start >= at_least_s and now - last < 5000:
            return
        last = now

def trials(n, cg, thrash, path, hold_s, quiet_s, arming):
    # `fresh`: armed anew before each trial, as a watchdog starting then arms it. `kept`: one
    # trigger for every trial, as a watchdog keeps it; trial 0 (not printed) is its first fire.
    trigger = arm()
    for trial in range(0 if arming == "kept" else 1, n + 1):
        quiet(trigger, quiet_s)
        if arming == "fresh":
            os.close(trigger)
            trigger = arm()
        proc = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec python3 "$@"', cg, thrash, path,
             str(hold_s), cg], stdout=subprocess.PIPE, start_new_session=True)
        out = proc.stdout.fileno()
        said = b""
        while not said.endswith(b"\n") and (got := os.read(out, 1)):
            said += got
        assert said == b"go\n", said
        said = b""
        go, base = time.monotonic(), some_total_us()
        p = select.poll()
        p.register(trigger, select.POLLPRI)
        p.register(out, select.POLLIN)
        limit_at = fire_at = None
        while fire_at is None and (left := go + hold_s - time.monotonic()) > 0:
            for fd, ev in p.poll(left * 1000):
                if fd == trigger and ev & select.POLLPRI:
                    fire_at = time.monotonic()
                elif fd == out and (line := os.read(out, 64)):
                    said += line
                    if b"\n" in said and said.startswith(b"limit "):
                        limit_at = float(said.split()[1])
                elif fd == out:
                    p.unregister(out)
        stall = (some_total_us() - base) / 1000
        proc.kill()
        proc.wait()
        if trial == 0:
            continue
        if fire_at is None or limit_at is None:
            print(f"{arming}\t{trial}\tFalse\tnan\tnan\t{stall:.0f}", flush=True)
        else:
            print(f"{arming}\t{trial}\tTrue\t{(fire_at - limit_at) * 1000:.1f}\t"
                  f"{(fire_at - go) * 1000:.1f}\t{stall:.0f}", flush=True)

def small(n, cg, thrash, path, hold_s, quiet_s, small_s):
    # A short thrash (tens of ms of stall, far under the 200 ms threshold) seen by a trigger
    # armed just before it and by one kept since a first fire.
    def run(seconds):
        subprocess.run(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec python3 "$@"', cg, thrash,
                        path, str(seconds), cg], stdout=subprocess.DEVNULL, check=True)
    kept = arm()
    run(hold_s)
    print("trial\tstall_ms\tfresh_fired\tkept_fired")
    for trial in range(1, n + 1):
        quiet(kept, quiet_s)
        fresh = arm()
        base = some_total_us()
        run(small_s)
        end = time.monotonic() + 4
        got = {fresh: False, kept: False}
        while (left := end - time.monotonic()) > 0:
            p = select.poll()
            for fd in got:
                p.register(fd, select.POLLPRI)
            for fd, ev in p.poll(left * 1000):
                got[fd] = got[fd] or bool(ev & select.POLLPRI)
        print(f"{trial}\t{(some_total_us() - base) / 1000:.0f}\t{got[fresh]}\t{got[kept]}", flush=True)
        os.close(fresh)

def log(seconds):
    trigger = arm()
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if fired(trigger, int(left * 1000) + 1):
            print(f"{time.time():.6f}", flush=True)

if sys.argv[1] == "small":
    small(int(sys.argv[2]), *sys.argv[3:6], float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8]))
elif sys.argv[1] == "trials":
    trials(int(sys.argv[2]), *sys.argv[3:6], float(sys.argv[6]), float(sys.argv[7]), sys.argv[8])
else:
    log(float(sys.argv[2]))
PY

# (a) The trigger alone.
printf 'arm\ttrial\tfired\tfrom_limit_ms\tfrom_go_ms\tstall_at_fire_ms\n' >"$WORK/trials.tsv"
for arming in $ARMS; do
    python3 "$WORK/psi_fire.py" trials "$TRIALS" "$CG" "$WORK/thrash.py" "$WORK/file" \
        "$HOLD_S" "$QUIET_S" "$arming" >>"$WORK/trials.tsv"
done
[ -n "$OUT" ] && cp "$WORK/trials.tsv" "$OUT"
PYTHONPATH=scripts/bench python3 - "$WORK/trials.tsv" <<'PY'
import csv, statistics, sys
from stats import quantile
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for arming in dict.fromkeys(r["arm"] for r in rows):
    rs = [r for r in rows if r["arm"] == arming]
    ok = [r for r in rs if r["fired"] == "True"]
    print(f"(a) {arming} trigger: fired in {len(ok)} of {len(rs)} trials")
    for col, what in [("from_limit_ms", "fire - limit first hit"), ("from_go_ms", "fire - thrasher start"),
                      ("stall_at_fire_ms", "stall counted at the fire")]:
        xs = [float(r[col]) for r in ok]
        if xs:
            print(f"    {what:>26}: min {min(xs):.0f} ms, p50 {statistics.median(xs):.0f} ms, "
                  f"p99 {quantile(xs, 0.99):.0f} ms, max {max(xs):.0f} ms")
PY

# (a') A stall far under the threshold.
python3 "$WORK/psi_fire.py" small "$SMALL_TRIALS" "$CG" "$WORK/thrash.py" "$WORK/file" \
    "$HOLD_S" "$QUIET_S" "$SMALL_S" >"$WORK/small.tsv"
python3 - "$WORK/small.tsv" "$SMALL_S" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
stall = sorted(int(r["stall_ms"]) for r in rows)
fresh = sum(r["fresh_fired"] == "True" for r in rows)
kept = sum(r["kept_fired"] == "True" for r in rows)
print(f"(a') a {sys.argv[2]} s thrash, {stall[0]}-{stall[-1]} ms of stall counted: a trigger armed just "
      f"before fired in {fresh} of {len(rows)}, one kept since a first fire in {kept} of {len(rows)}")
PY

# (b) The watchdog on the thrasher, with the tool's own trigger beside it.
ev="$WORK/events.jsonl"
sh -c 'echo $$ > "$0/cgroup.procs" && exec python3 "$@"' "$CG" "$WORK/thrash.py" "$WORK/file" \
    "$DURATION_S" "$CG" >/dev/null &
target=$!
PIDS+=("$target")
until grep -q "${CG##*/}" "/proc/$target/cgroup" 2>/dev/null || ! kill -0 "$target" 2>/dev/null; do sleep 0.01; done
python3 "$WORK/psi_fire.py" log "$DURATION_S" >"$WORK/fires.txt" &
PIDS+=("$!")
XDG_STATE_HOME="$WORK/state" strace -f -ttt -T -e trace=poll,ppoll -o "$WORK/strace.txt" \
    "$WATCHDOG" --interval "$INTERVAL" --gpu off --no-notify --no-status \
    --events "$ev" --request-file "$WORK/req.json" --pid "$target" 2>"$WORK/wd.err" &
PIDS+=("$!")
sleep 1
wd=$(pgrep -P "$!" -x watchdog || true)
psi_fd=
for f in /proc/"$wd"/fd/*; do
    [ "$(readlink "$f" 2>/dev/null)" = /proc/pressure/memory ] && psi_fd=${f##*/}
done
wait "$target" || true
wait "${PIDS[2]}" || true
wait "${PIDS[1]}" || true
python3 - "$WORK/strace.txt" "${psi_fd:-none}" "$WORK/fires.txt" "$ev" "$DURATION_S" <<'PY'
import json, re, sys
trace, fd, fires, ev, duration = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
fires = [float(l) for l in open(fires) if l[0].isdigit()]
start = next(json.loads(l) for l in open(ev) if json.loads(l)["event"] == "start")
print(f"(b) watchdog wake_sources {start['wake_sources']}, unarmed {start['unarmed']}")
wakes, waits, pending = [], 0, {}
for line in open(trace):
    pid, at, call = line.rstrip("\n").split(None, 2)
    # A call another thread interrupted is cut in two: `... <unfinished ...>` at the call,
    # `<... ppoll resumed>...` at the return; joined here, timed at the return.
    if call.endswith("<unfinished ...>"):
        pending[pid] = call[: -len("<unfinished ...>")]
        continue
    resumed = re.match(r"<\.\.\. p?poll resumed>(.*)", call)
    if resumed:
        call = pending.pop(pid, "") + resumed.group(1)
    m = re.match(r"p?poll\(\[(.*?)\], (\d+), .*\) = \d+(.*)<([\d.]+)>$", call)
    # The loop's waits: every descriptor it sleeps on, the PSI trigger among them (not the
    # zero-timeout look at the trigger alone after a wake-up).
    if not m or int(m.group(2)) < 2 or f"fd={fd}, events=POLLPRI" not in m.group(1):
        continue
    waits += 1
    if re.search(rf"\{{fd={fd}, revents=[A-Z|]*POLLPRI", m.group(3)):
        wakes.append(float(at) + (0 if resumed else float(m.group(4))))
lag = sorted(min((w - f for f in fires if f <= w + 0.001), default=float("nan")) * 1000 for w in wakes)
print(f"    over {duration:.0f} s: the tool's trigger fired {len(fires)} times; the watchdog's loop "
      f"waited {waits} times, {len(wakes)} of them ended by PSI (fd {fd})")
if lag:
    near = [x for x in lag if abs(x) < 5]
    print(f"    {len(near)} of the {len(lag)} PSI wake-ups within 5 ms of a fire of the tool's trigger "
          f"(min {lag[0]:.1f} ms, p50 {lag[len(lag) // 2]:.1f} ms, max {lag[-1]:.1f} ms after it)")
PY
echo "    watchdog: $(grep -m1 -o 'Sampled.*' "$WORK/wd.err" || tail -1 "$WORK/wd.err")"
