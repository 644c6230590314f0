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
