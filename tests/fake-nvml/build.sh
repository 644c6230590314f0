#!/bin/sh
# Builds the fake NVML library: tests/fake-nvml/build.sh [OUT_DIR]
# (default OUT_DIR: tests/fake-nvml/build, ignored by git). Prints the library's path.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
mkdir -p "$out"
${CC:-cc} -shared -fPIC -O2 -Wall -Wextra -o "$out/libnvidia-ml.so.1" "$here/fake_nvml.c" -ldl
echo "$out/libnvidia-ml.so.1"
