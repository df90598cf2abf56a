#!/usr/bin/env bash
# On a CUDA machine: configure with CUDA for Hopper, build, run the GPU tests (make test-gpu: the
# kernel and model tests, compute-sanitizer on the kernel tests, the tools on the GPU), the CPU
# suite and, where python3 has torch and transformers, the checks against transformers
# (scripts/check-hf-*.sh); optionally the CUDA benchmarks (with several GPUs, generation split over
# them too); and print a short summary table.
#   bash scripts/gpu-test.sh [--bench] [BUILD_DIR]
set -uo pipefail
bench=0
if [ "${1:-}" = --bench ]; then bench=1; shift; fi
build=${1:-build-gpu}
export NCCL_NVLS_ENABLE=0
jobs=$(nproc)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B "$build" -G Ninja -DMEG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null || exit 1
cmake --build "$build" -j "$jobs" 2>&1 | tail -n 3 || exit 1

declare -A result
order=()
run() {
  local name=$1
  shift
  order+=("$name")
  if "$@"; then result[$name]=pass; else result[$name]=FAIL; fi
}
run test-gpu bash -c "cd $build && ctest -L gpu --output-on-failure"
# Kernel tests only (the model and tool tests are too slow under the sanitizer).
run sanitizer bash -c "compute-sanitizer --tool memcheck --error-exitcode 1 $build/tests/meg-gpu-tests '[kernels],[loss],[activations]' >/dev/null"
run test-cpu bash -c "cd $build && ctest -L cpu --output-on-failure -j $jobs"
# Our files and numbers in the real client, where python3 has torch and transformers.
if python3 -c "import torch, transformers" 2>/dev/null; then
  for check in hf-export hf-eval hf-generate hf-archs hf-tokenizer hf-bpe-train; do run "check-$check" bash "scripts/check-$check.sh" "$build"; done
fi
[ $bench = 1 ] && run bench bash -c "bash scripts/bench-gpu.sh $build && bash scripts/bench-generate.sh $build"
# Generation split over GPUs, where there are several.
[ $bench = 1 ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] &&
  run bench-tp bash scripts/bench-generate-tp.sh "$build"

printf '\n| suite | result |\n|---|---|\n'
for k in "${order[@]}"; do printf '| %s | %s |\n' "$k" "${result[$k]}"; done
[[ "${result[*]}" != *FAIL* ]]
