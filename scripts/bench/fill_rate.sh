#!/usr/bin/env bash
# The fastest rate each kind of resource fills here, for the `fill_rate` defaults
# (docs/prediction.md, "Fill rates"): scripts/bench/fill_rate.c with 1, 2 and 4 writers
#   - host memory: page faults of anonymous memory (MemTotal - MemAvailable)
#   - cgroup memory: the same in a cgroup v1 memory cgroup (memory.usage_in_bytes)
#   - disk: write(2) of 1 MiB blocks through the page cache, to a fresh tmpfs and to an
#     ext4 file (the filesystem of DIR, default this checkout's), sampled with statvfs
# Each prints the average and the fastest rise over any 100 ms and 1 s, sampled every 10 ms.
#
# Usage: scripts/bench/fill_rate.sh            (as root: the cgroup and the tmpfs mount)
# Env:   BYTES=4294967296 (per run, split over the writers)  DIR=. (the ext4 file's directory)
set -euo pipefail

cd "$(dirname "$0")/../.."
BYTES=${BYTES:-$((4 << 30))}
DIR=${DIR:-$PWD}
WORK=$(mktemp -d /tmp/wd-fill.XXXXXX)
CG=/sys/fs/cgroup/memory/wd-fill.$$
trap 'umount "$WORK/tmpfs" 2>/dev/null || true; rmdir "$CG" 2>/dev/null || true; rm -rf "$WORK"' EXIT

cc -O2 -Wall -pthread -o "$WORK/fill_rate" scripts/bench/fill_rate.c
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in 1 2 4; do "$WORK/fill_rate" mem "$w" $((BYTES / w)); done
if [ -d /sys/fs/cgroup/memory ]; then
    mkdir -p "$CG"
    echo $((2 * BYTES)) >"$CG/memory.limit_in_bytes"
    for w in 1 2; do "$WORK/fill_rate" cgroup "$w" $((BYTES / w)) "$CG"; done
else
    echo "# no cgroup v1 memory hierarchy: cgroup memory not measured"
fi
mkdir -p "$WORK/tmpfs"
mount -t tmpfs -o size=$((2 * BYTES)) tmpfs "$WORK/tmpfs"
for w in 1 2; do echo -n "tmpfs: "; "$WORK/fill_rate" file "$w" $((BYTES / w)) "$WORK/tmpfs"; done
for w in 1 2; do echo -n "$(findmnt -n -o FSTYPE -T "$DIR") ($DIR): "; "$WORK/fill_rate" file "$w" $((BYTES / w)) "$DIR"; done
