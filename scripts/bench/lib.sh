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
