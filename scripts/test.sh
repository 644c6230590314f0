#!/usr/bin/env bash
# Runs every test of the project: Rust unit, integration and end-to-end tests (real
# processes, cgroups, tmpfs and signals; run as root for the cgroup and tmpfs ones),
# and the Python client's tests. The same command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads=2
cargo test -p watchdog-sampler --no-default-features
WATCHDOG_BIN="$PWD/target/debug/watchdog" python3 -m unittest discover -s python/tests -v
