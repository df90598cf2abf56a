#!/usr/bin/env bash
# On a CUDA machine: configure with CUDA for Hopper, build, run the GPU tests and the CPU suite, and
# print a short summary table. Used as: bash scripts/gpu-test.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build-gpu}
export NCCL_NVLS_ENABLE=0
jobs=$(nproc)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B "$build" -G Ninja -DMEG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null || exit 1
cmake --build "$build" -j "$jobs" 2>&1 | tail -n 3 || exit 1

declare -A result
run() {
  local name=$1
  shift
  if "$@"; then result[$name]=pass; else result[$name]=FAIL; fi
}
run test-gpu bash -c "cd $build && ctest -L gpu --output-on-failure"
run test-cpu bash -c "cd $build && ctest -L cpu --output-on-failure -j $jobs"

printf '\n| suite | result |\n|---|---|\n'
for k in test-gpu test-cpu; do printf '| %s | %s |\n' "$k" "${result[$k]}"; done
[[ "${result[*]}" != *FAIL* ]]
