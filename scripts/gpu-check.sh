#!/usr/bin/env bash
# The CUDA out-of-memory check on a real NVIDIA GPU (issue 19, item 5). Builds nothing, needs
# no network: Python with a CUDA build of torch, and the built watchdog binary.
#
#   WATCHDOG_BIN=path/to/watchdog scripts/gpu-check.sh      # default: target/release/watchdog
#
# Runs, each under the watchdog and capped in time, sized from the device's free memory:
#   (a) a tensor leaked every step: warned (step_peak/trend) and saved before the OOM, then
#       the OOM and the watchdog's gpu_oom verdict;
#   (b) evaluations whose peak grows: warned (eval_peak) before the one that fails;
#   (c) a forced CUDA OOM saved by the last-chance save (plain loop; Lightning and
#       Transformers when installed) and resumed in a new process;
#   (d) the watchdog's NVML reading against torch.cuda.mem_get_info() and nvidia-smi, and
#       the cost of torch.cuda.memory_stats() (mean and p99 over 1,000 calls).
# Prints one table (case, result, figures) and exits 1 when a case failed. Without a GPU it
# says so in one line, runs what needs none (the binary, the client, torch, the last-chance
# save on the CPU) and exits 0 unless one of those failed. Under 5 minutes.
#
# Environment: WATCHDOG_BIN (the binary), PYTHON (default python3), GPU_CHECK_KEEP=1 (keep
# the cases' logs, events and recordings; they are kept anyway when a case failed).
# Self-test only, for this repository's tests: GPU_CHECK_SELF_TEST_FAKE_NVML=PATH (the
# library tests/fake-nvml/build.sh makes) runs the GPU cases against the fake NVML and a
# fake CUDA allocator on the CPU; every result is then marked fake-pass. Never set it on a
# real GPU machine: it is how this script is tested where there is no GPU.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${WATCHDOG_BIN:-$root/target/release/watchdog}"
python="${PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
    echo "gpu-check: no Python: '$python' is not on PATH (set PYTHON to the interpreter that has torch)" >&2
    exit 2
fi
exec "$python" "$root/scripts/gpu-check/check.py" --bin "$bin" --repo "$root" --python "$(command -v "$python")"
