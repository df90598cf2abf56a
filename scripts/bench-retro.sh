#!/usr/bin/env bash
# RETRO retrieval benchmarks on the CPU (the GPU rows come with the CUDA embedder and the cuBLAS
# exact search). Prints markdown tables and writes them to .bench/retro.md.
#   scripts/bench-retro.sh BUILD_DIR
#
#   embed: chunks of 64 tokens per second through meg-retro-build's embed stage (db stage excluded)
#     with a GPT-2 124M embedder (random weights from one training step: the rate does not depend
#     on them), on the Megatron fortunes set tokenized with GPT-2 (Megatron-written, in tests/data).
#     The reference is the H100 target the GPU path is to be measured against; on the CPU there is
#     none, so the row shows the rate and the GEMM throughput it implies.
#   index: tests/bench/bench_retro_index on BENCH_RETRO_N (default 1,000,000) synthetic vectors of
#     768 (the 124M embedder's width): build seconds, queries per second on all cores and recall@10
#     for flat (the exact search: the reference row and the ground truth), ivf, ivf-pq and hnsw.
# Environment:
#   BENCH_RETRO_N=1000000        vectors indexed
#   BENCH_RETRO_QUERIES=1000     queries
#   BENCH_RETRO_INDEX_ARGS=""    more bench_retro_index options (--nprobe 32, --ef-search 128, ...)
#   BENCH_DIR=.bench             where the embedder and the database go
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: bench-retro.sh BUILD_DIR}" && pwd)
work=${BENCH_DIR:-$root/.bench}/retro
n=${BENCH_RETRO_N:-1000000}
queries=${BENCH_RETRO_QUERIES:-1000}
export PATH="$build/bin:$PATH"
for t in bin/meg-blend bin/meg-pretrain bin/meg-retro-build tests/bench_retro_index; do
  [ -x "$build/$t" ] || { echo "bench-retro: $build/$t missing (build first: make)" >&2; exit 1; }
done
data=$root/tests/data/megatron/fortunes_gpt2
vocab=$root/tests/data/gpt2/vocab.json
merges=$root/tests/data/gpt2/merges.txt
mkdir -p "$work"
out=${BENCH_DIR:-$root/.bench}/retro.md

# The embedder: GPT-2 124M after one CPU step on the corpus.
if [ ! -f "$work/embedder/latest" ]; then
  meg-blend -q --seq-length 1024 --samples 4 -o "$work/gpt2.blend" 1 "$data"
  meg-pretrain -q --device cpu --model gpt2-124m --data "$work/gpt2.blend" --tokenizer "$vocab" --merges "$merges" \
    --iters 1 --lr 1e-4 --save "$work/embedder"
fi
rm -rf "$work/db"
meg-retro-build -q --data "$data" --load "$work/embedder" --out "$work/db" --stages db,embed --chunk-length 64 \
  --pad-id 50256
embed=$(python3 - "$work/db/embed/stage.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
# Forward FLOPs a chunk: 2 per weight of the 12 blocks (12 * 12 * 768^2 weights) per token, and the
# attention's 2 * 2 * 64 * 768 per token over 64 positions (causal half ignored), 64 tokens.
flops = 64 * (2 * 12 * 12 * 768 ** 2 + 12 * 4 * 64 * 768)
print("%.1f %.1f %d" % (s["chunks_per_second"], s["chunks_per_second"] * flops / 1e9, s["chunks"]))
PY
)
read -r rate gflops chunks <<<"$embed"
{
  echo "| benchmark | measured | reference | ratio |"
  echo "|---|---:|---:|---:|"
  echo "| embed: gpt2-124m, $chunks chunks of 64 tokens, CPU fp32, chunks/s ($gflops GFLOP/s) | $rate | H100: GPU path | - |"
  echo
  "$build/tests/bench_retro_index" -q --n "$n" --queries "$queries" ${BENCH_RETRO_INDEX_ARGS:-}
} | tee "$out"
