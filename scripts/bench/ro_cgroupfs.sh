#!/bin/sh
# Runs COMMAND in a private mount namespace where the cgroup v1 memory hierarchy is mounted
# read-only, as systemd's ProtectControlGroups=yes leaves it: a v1 usage threshold cannot be
# armed there, so the watchdog polls. Usage: scripts/bench/ro_cgroupfs.sh COMMAND [ARG...]
exec unshare -m --propagation private sh -c \
    'mount -o remount,bind,ro /sys/fs/cgroup/memory && exec "$@"' sh "$@"
