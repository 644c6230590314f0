#!/usr/bin/env bash
# The floor under reaction.sh's MODE=cgroup figure: scripts/bench/reaction_floor.c (no
# watchdog) polls a v1 memory threshold and signals the process that crossed it, whose
# handler stamps the arrival. With BUSY CPU spinners beside it, this is the part of
# reaction.sh's tail that the kernel and the scheduler take whoever watches: the watcher's
# wake, then the target's run of its handler.
# With AFTER_KIB the process stops that many KiB past the threshold instead of 8 MiB past:
# the kernel checks a cgroup's thresholds only every 128 pages charged on a CPU
# (THRESHOLDS_EVENTS_TARGET, mm/memcontrol-v1.c), so a process that stops soon after its
# crossing is reported late or never ("never": not within 3 s).
#
# Usage: scripts/bench/reaction_floor.sh      (root, cgroup v1, cc)
# Env:   TRIALS=50 BUSY=0 AFTER_KIB= NOHUGE=1 (0: huge pages allowed) BASE=64 (MiB touched
#        before) HIGH= (1: a second threshold 64 KiB up, as the watchdog arms; see the .c)
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIALS=${TRIALS:-50}
BUSY=${BUSY:-0}
AFTER_KIB=${AFTER_KIB:-}
if [ "${NOHUGE:-1}" = 0 ]; then unset NOHUGE; else export NOHUGE=1; fi
WORK=$(mktemp -d /tmp/wd-reaction-floor.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-reaction-floor.$$
SPINNERS=()
trap '[ ${#SPINNERS[@]} -eq 0 ] || kill "${SPINNERS[@]}" 2>/dev/null; sleep 0.1; rmdir "$CG" 2>/dev/null; rm -rf "$WORK"' EXIT

[ "$(id -u)" = 0 ] || { echo "reaction_floor.sh: run as root (a memory cgroup)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "reaction_floor.sh: no cgroup v1 memory hierarchy" >&2; exit 2; }
cc -O2 -Wall -o "$WORK/floor" scripts/bench/reaction_floor.c
mkdir -p "$CG"
echo $((430 << 20)) >"$CG/memory.limit_in_bytes"
for _ in $(seq 1 "$BUSY"); do
    (trap - EXIT; while :; do :; done) &
    SPINNERS+=($!)
done

# The threshold 8 MiB above a 64 MiB base; the jump 8 MiB past it, or AFTER_KIB past it.
if [ -n "$AFTER_KIB" ]; then export JUMP_KIB=$((8192 + AFTER_KIB)); fi
echo "# $(nproc) cores, kernel $(uname -r); $BUSY spinner(s); ${AFTER_KIB:-8192} KiB past the threshold; NOHUGE=${NOHUGE:-0} BASE=${BASE:-64} HIGH=${HIGH:-}; $TRIALS trials" >&2
for _ in $(seq 1 "$TRIALS"); do
    "$WORK/floor" "$CG" 8 16
done >"$WORK/lines"

PYTHONPATH=scripts/bench python3 - "$WORK/lines" <<'EOF'
import sys
from stats import quantile
woke, sig, never = [], [], 0
for line in open(sys.argv[1]):
    f = line.split()
    if f == ["never"]:
        never += 1
    elif "woke-cross" in f:
        woke.append(float(f[f.index("woke-cross") + 1]))
        sig.append(float(f[f.index("sig-cross") + 1]))
print(f"reported {len(woke)}, never {never}")
for name, v in (("woke - cross", woke), ("signal - cross", sig)):
    if v:
        print(f"{name}: p50 {quantile(v, .5):.2f} ms, p99 {quantile(v, .99):.2f} ms, "
              f"max {max(v):.2f} ms, over 2 ms {sum(x > 2 for x in v)}, over 10 ms {sum(x > 10 for x in v)}")
EOF
