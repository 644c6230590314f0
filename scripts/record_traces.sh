#!/usr/bin/env bash
# Re-record the real-process traces of the predictor's corpus (tests/traces/rec_*.csv).
# Needs root (a v1 memory cgroup and a tmpfs mount); takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/traces
rec=scripts/record_trace.py
wl=scripts/record_workloads.py

# 1. A pure-Python training loop leaking 8 MiB/s under a 384 MiB cgroup limit, until the OOM kill.
python3 "$rec" --out "$out/rec_oom_leak.csv" --name oom_leak --lead 5 --hz 50 \
  --shape "pure-Python training loop (24 MiB per-step activations) leaking 8 MiB/s in a 384 MiB v1 memory cgroup, OOM-killed" \
  --cgroup-limit $((384 << 20)) -- python3 "$wl" leak 8

# 2. A stable saw-tooth (60 -> 200 MiB every 2 s) under a 256 MiB limit: never exhausts.
python3 "$rec" --out "$out/rec_stable_sawtooth.csv" --name stable_sawtooth --lead 5 --hz 50 \
  --shape "allocate 60 -> 200 MiB and free, every 2 s, in a 256 MiB v1 memory cgroup (never exhausts)" \
  --cgroup-limit $((256 << 20)) -- python3 "$wl" sawtooth 60 200 2 40

# 3. A checkpoint writer filling a 200 MiB tmpfs with 20 MiB files every 1.5 s, until ENOSPC.
mnt=$(mktemp -d /mnt/wd-rec-XXXXXX)
mount -t tmpfs -o size=200m tmpfs "$mnt"
trap 'umount "$mnt"; rmdir "$mnt"' EXIT
python3 "$rec" --out "$out/rec_tmpfs_checkpoints.csv" --name tmpfs_checkpoints --lead 3 --hz 50 \
  --shape "checkpoint writer (20 MiB files, 1 MiB writes, fsync, rename) every 1.5 s into a 200 MiB tmpfs, until ENOSPC" \
  --disk "$mnt" -- python3 "$wl" checkpoints "$mnt" 20 1.5
