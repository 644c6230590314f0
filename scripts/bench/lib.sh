# Helpers shared by the bench scripts (sourced, not run).

# Kills each PID given and its process group (runs are started with setsid, so a group
# holds a run's children too). Empty arguments and processes already gone are skipped.
kill_groups() {
    local p
    for p in "$@"; do
        [ -n "$p" ] || continue
        kill -- "-$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
}

# From now until the script exits: at exit, kills the process groups in the script's PIDS
# array and removes its WORK directory.
clean_up_at_exit() {
    trap 'kill_groups "${PIDS[@]:-}"; rm -rf "$WORK"' EXIT
}

# On-CPU nanoseconds of the processes given, summed over their threads (schedstat field 1;
# %.0f because mawk's %d stops at 2^31); a process gone counts 0.
cpu_ns() {
    local p
    for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done |
        awk '{s += $1} END {printf "%.0f\n", s}'
}

# Voluntary context switches of process $1's main thread: each sleep to a deadline is one.
vcsw() { awk '/^voluntary_ctxt_switches:/ {print $2}' /proc/"$1"/task/"$1"/status 2>/dev/null || echo 0; }

# Starts scripts/bench/mem_mover.py (1% of host memory allocated and freed every 2 s, so host
# memory moves as on a live machine), adds it to the script's PIDS, and gives it 2 s.
start_mem_mover() {
    setsid python3 scripts/bench/mem_mover.py >/dev/null 2>&1 &
    PIDS+=("$!")
    sleep 2
}

# Starts `sleep $2` in the v1 memory cgroup $1 (it joins before it execs), in a process
# group of its own; $! is its PID after the call.
sleep_in_cgroup() {
    setsid sh -c 'echo $$ >"$0/cgroup.procs" && exec sleep "$1"' "$1" "$2" >/dev/null 2>&1 &
}

# Starts one bench run: a process-group leader named wd-bench-tgt with 9 children sleeping
# $1 seconds; prints its PID and the time it was started, as "PID START".
start_bench_run() {
    local life=$1 t0
    t0=$(date +%s.%N)
    setsid bash -c 'for i in 1 2 3 4 5 6 7 8 9; do sleep "$1" & done; wait' wd-bench-tgt "$life" \
        </dev/null >/dev/null 2>&1 &
    echo "$! $t0"
}

# A bench daemon's config: its own keys, everything it writes under $1 (10 Hz, a scan every
# 250 ms), and with $2 = bench the rule taking the bench runs (GPU off, / and /dev/shm, and
# MEM_LIMIT as mem_limit when set); the caller appends any other rule.
bench_daemon_config() {
    cat <<EOF
interval = "100ms"
scan_interval = "250ms"
socket = "$1/daemon.sock"
request_dir = "$1/users"
state_dir = "$1/state"
EOF
    [ "${2:-}" = bench ] || return 0
    cat <<EOF

[[rule]]
name = "bench"
[rule.match]
command = "wd-bench-tgt"
[rule.watch]
gpu = "off"
notify = false
disks = ["/", "/dev/shm"]
${MEM_LIMIT:+mem_limit = \"$MEM_LIMIT\"}
EOF
}
