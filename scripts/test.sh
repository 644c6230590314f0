#!/usr/bin/env bash
# Runs every test of the project: Rust unit, integration and end-to-end tests (real
# processes, cgroups, tmpfs and signals; run as root for the cgroup and tmpfs ones),
# the Python client's tests, and the wheel in a real Jupyter kernel (needs PyPI and
# python3-venv; a few minutes). The same command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads=2
cargo test -p watchdog-sampler --no-default-features
WATCHDOG_BIN="$PWD/target/debug/watchdog" python3 -m unittest discover -s python/tests -v
# The notebook path as a user gets it: a fresh venv, `pip install` of this checkout (builds
# the wheel with maturin, release profile), a real Jupyter kernel run through nbclient.
python3 -m unittest discover -s tests/notebook -v
