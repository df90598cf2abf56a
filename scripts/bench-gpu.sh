#!/usr/bin/env bash
# CUDA benchmarks (make bench on a CUDA machine; scripts/gpu-test.sh --bench): training throughput
# of GPT-2 124M / 355M / 1.56B and Llama 1B against the PyTorch figures, then the kernel
# benchmarks, then where one GPT-2 124M and one 1.56B step spend their time, per kernel family
# (Nsight Compute, when present). Markdown tables on stdout; copies under OUT_DIR (default .bench/gpu).
#   scripts/bench-gpu.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
out=${OUT_DIR:-.bench/gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
bench=$build/tests

echo "## Training throughput (bf16, seq 1024, one GPU)"
"$bench/bench_train" --steps "${BENCH_STEPS:-10}" | tee "$out/train.md"
for b in bench_attention bench_kernels bench_loss_optim; do
  [ -x "$bench/$b" ] || continue
  echo; echo "## $b"
  "$bench/$b" | tee "$out/$b.md"
done

if command -v ncu >/dev/null 2>&1; then
  for run in gpt2-124m:32 gpt2-1.5b:8; do
    name=${run%%:*}
    echo; echo "## $name, micro-batch ${run##*:}: one training step by kernel family (Nsight Compute)"
    # Two warm-up steps run unprofiled; bench_train --profile opens the profiler for the third.
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --profile-from-start off \
        "$bench/bench_train" --steps 1 --warmup 2 --profile "$run" >"$out/ncu-$name.csv" 2>"$out/ncu-$name.err"
    python3 "$(dirname "$0")/kernel-breakdown.py" "$out/ncu-$name.csv" | tee "$out/breakdown-$name.md"
  done
fi
