#!/usr/bin/env bash
# Runs every test of the project: Rust unit, integration and end-to-end tests (real
# processes, cgroups, tmpfs and signals), the Python client's tests, the SLURM tests on a
# real one-node cluster, and the wheel in a real Jupyter kernel (needs PyPI and
# python3-venv; a few minutes). The same command CI runs.
#
# Some tests need root (memory cgroups, tmpfs mounts, dropping to user nobody, SLURM's
# daemons), slurm-wlm and munge, headless Chromium, the Python frameworks or
# python3-venv. They run when they can. When they cannot,
# they FAIL if CI is set (to anything but empty, "false" or "0") and are skipped otherwise;
# the skipped ones are listed at the end. One rule: crates/watchdog-testsupport (Rust) and
# python/tests/need.py (Python).
set -euo pipefail
cd "$(dirname "$0")/.."
WATCHDOG_TEST_SKIPS="$(mktemp -t watchdog-test-skips.XXXXXX)"
export WATCHDOG_TEST_SKIPS
list_skips() {
    if [ -s "$WATCHDOG_TEST_SKIPS" ]; then
        echo "== SKIPPED $(wc -l <"$WATCHDOG_TEST_SKIPS") test(s) (set CI=true to make these failures):"
        sed 's/^/   /' "$WATCHDOG_TEST_SKIPS"
    fi
    rm -f "$WATCHDOG_TEST_SKIPS"
}
trap list_skips EXIT

cargo build --workspace --all-targets
# A real one-node SLURM cluster (munged, slurmctld, slurmd started by tests/slurm/cluster.py;
# needs root, slurm-wlm and munge): jobs as an unprivileged user, time limits, requeues.
# Their jobs mostly wait on SLURM's one-minute limits, so they run beside the other tests,
# on a copy of this build's binary (later steps rebuild target/debug/watchdog); their
# output is shown, and their status counted, at the end.
slurm_dir="$(mktemp -d -t watchdog-slurm-tests.XXXXXX)"
cp "${CARGO_TARGET_DIR:-$PWD/target}/debug/watchdog" "$slurm_dir/watchdog"
WATCHDOG_BIN="$slurm_dir/watchdog" python3 -m unittest discover -s tests/slurm -v \
    >"$slurm_dir/log" 2>&1 &
slurm_pid=$!
slurm_result() {
    local status=0
    wait "$slurm_pid" || status=$?
    echo "== SLURM tests (tests/slurm), run beside the others:"
    cat "$slurm_dir/log"
    rm -rf "$slurm_dir"
    return "$status"
}
cargo test --workspace --no-fail-fast -- --test-threads=2
# The client's tests: the quick ones alone, then the files that train real models (most of
# the suite's time, torch on the CPU) in two lanes side by side (python/tests/lanes.py).
export WATCHDOG_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/watchdog"
python3 python/tests/lanes.py quick
models_log="$(mktemp -t watchdog-models.XXXXXX)"
python3 python/tests/lanes.py test_gpu_check >"$models_log" 2>&1 &
models_pid=$!
models_status=0
python3 python/tests/lanes.py test_frameworks test_last_chance_frameworks || models_status=$?
wait "$models_pid" || models_status=$?
echo "== python/tests/test_gpu_check.py, run beside the frameworks' tests:"
cat "$models_log"
rm -f "$models_log"
[ "$models_status" = 0 ]
unset WATCHDOG_BIN
# The headless build: no NVML, no desktop notifications (tokio, zbus). After the Python
# tests: it rebuilds target/debug/watchdog without them.
cargo test -p watchdog-sampler --no-default-features
cargo test -p watchdog-alerter --no-default-features
cargo test -p watchdog --no-default-features --test e2e notify::
cargo build -p watchdog  # the default binary back in target/debug
# The notebook path as a user gets it: a fresh venv, `pip install` of this checkout (builds
# the wheel with maturin, release profile), a real Jupyter kernel run through nbclient.
python3 -m unittest discover -s tests/notebook -v
slurm_result
