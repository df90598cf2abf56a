#!/usr/bin/env bash
# Generation throughput of the CUDA inference model (make bench on a CUDA machine): prefill and
# decode tokens/s at batch 1 and 32 for GPT-2 124M, GPT-2 1.56B and Llama 1B in bf16, against the
# bandwidth limit of a decode step and the compute limit of prefill
# (tests/bench/cuda/bench_generate.cpp says how they are counted; its decode rows copy all the
# logits to the host), then prefill and greedy decode (the argmax on the device) of each model in a
# process of its own, as docs/performance.md's table gives them, then decode steps queued one
# behind the other (greedy and top-p choices on the device, bench_generate --chained, as
# meg-generate runs them), then batch-1 decode at short contexts (8 and 200 prompt tokens, where
# the attention runs one block a head), then batch-1 decode with the linear layers as cuBLASLt
# products and separate norm, activation and add kernels (small_linear off), and without CUDA
# graphs: what the fused layers and the graphs save; then a decode step's products alone
# (bench_decode_chain: overlapped small_linear kernels, bare, with the norms, and with the model's
# epilogues, each left out in turn); then the cached attention alone at 1 to 32 rows
# (bench_decode_attention); then the device's choice of the next tokens
# alone (bench_logits), the host's (bench_sampler), and GPT-2 124M's decode steps with each choice,
# as meg-generate makes them (bench_generate --sampling: greedy, top-p and temperature alone on the
# device, top-k selected there and drawn on the host, each with and without a repetition penalty,
# applied on the device). Where Nsight Compute is present, one batch-1 decode step of each model
# kernel by kernel (its kernels timed one at a time, so without the overlap of their launches).
# Markdown tables on stdout; copies under OUT_DIR (default .bench/generate).
#   scripts/bench-generate.sh BUILD_DIR [bench_generate options]
set -euo pipefail
build=${1:-build}
shift || true
out=${OUT_DIR:-.bench/generate}
mkdir -p "$out"
bench=$build/tests/bench_generate

echo "## Generation throughput (bf16, one GPU)"
"$bench" "$@" | tee "$out/generate.md"
echo; echo "## Prefill of one prompt and greedy decode at 1, 16 and 32 rows, each model alone (docs/performance.md's table)"
for model in gpt2-124m gpt2-1.5b llama-1b; do
  "$bench" --phase prefill --batch 1 "$@" "$model"
  for batch in 1 16 32; do "$bench" --phase decode --batch $batch --sampling greedy "$@" "$model"; done
done | tee "$out/generate-greedy.md"
echo; echo "## Decode steps queued one behind the other, as meg-generate runs greedy and top-p steps"
for sampling in greedy top-p; do "$bench" --phase decode --sampling $sampling --chained "$@"; done |
  tee "$out/generate-chained.md"
echo; echo "## Batch-1 decode at short contexts (the attention's staged grid: one block a head)"
for prompt in 8 200; do "$bench" --phase decode --batch 1 --prompt $prompt "$@"; done |
  tee "$out/generate-short.md"
echo; echo "## Batch-1 decode without small_linear"
"$bench" --no-small-linear --phase decode --batch 1 "$@" | tee "$out/generate-no-small-linear.md"
echo; echo "## Without CUDA graphs"
"$bench" --no-graphs "$@" gpt2-124m | tee "$out/generate-no-graphs.md"
echo; echo "## A batch-1 decode step's linear layers alone, as overlapped small_linear kernels"
"$build/tests/bench_decode_chain" | tee "$out/decode-chain.md"
echo; echo "## A decode step's cached attention alone, at 1 to 32 rows"
"$build/tests/bench_decode_attention" | tee "$out/decode-attention.md"
echo; echo "## What a decode step reads off its output rows on the device (argmax, top-k, softmax draws)"
"$build/tests/bench_logits" | tee "$out/logits.md"
echo; echo "## Choosing the next token on the host"
"$build/tests/bench_sampler" | tee "$out/sampler.md"
echo; echo "## GPT-2 124M decode steps with the choice of the next tokens"
for sampling in greedy greedy-penalty top-k top-k-penalty top-p top-p-penalty temperature temperature-penalty; do
  "$build/tests/bench_generate" --phase decode --sampling $sampling "$@" gpt2-124m
done | tee "$out/generate-sampling.md"

if command -v ncu >/dev/null 2>&1; then
  for model in gpt2-124m gpt2-1.5b llama-1b; do
    echo; echo "## $model: one batch-1 decode step, kernel by kernel (Nsight Compute)"
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --profile-from-start off \
        "$bench" --phase decode --batch 1 --steps 3 --warmup 2 --profile "$@" "$model" >"$out/ncu-$model.csv" \
        2>"$out/ncu-$model.err"
    python3 "$(dirname "$0")/kernel-breakdown.py" --by-kernel "$out/ncu-$model.csv" | tee "$out/decode-$model.md"
  done
fi
