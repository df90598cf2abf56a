# RETRO retrieval benchmarks, on the CPU and, in a CUDA build on a machine with a GPU, on the GPU.
# Prints markdown tables and writes them to .bench/retro.md.
#   scripts/bench-retro.sh BUILD_DIR
#
#   embed: chunks of 64 tokens per second through meg-retro-build's embed stage (db stage and model
#     loading excluded) with a GPT-2 124M embedder (random weights from one training step: the rate
#     does not depend on them), and the model FLOP/s it implies (the forward of the 12 blocks; the
#     embedder has no output layer). On the CPU (fp32, batch 16): the Megatron fortunes set
#     tokenized with GPT-2 (Megatron-written, in tests/data). On the GPU (bf16, batch 256): that set
#     repeated BENCH_RETRO_REPEAT times (meg-index --merge), enough chunks for a steady rate, against
#     the H100's bf16 figures: about 800 TFLOP/s for a large cuBLAS product (8192^3, the practical
#     ceiling) and 989 TFLOP/s dense peak.
#   index: tests/bench/bench_retro_index on BENCH_RETRO_N (default 1,000,000) synthetic vectors of
#     768 (the 124M embedder's width): build seconds, queries per second on all cores and recall@10
#     for flat (the exact search: the reference row and the ground truth), ivf, ivf-pq and hnsw.
#     On the GPU the flat row is the cuBLAS exact search (recall@10 against the CPU's: 1.000 when
#     they agree), with its fp64 TFLOP/s against the fp64 tensor-core peak; the approximate indexes
#     search on the CPU.
# Environment:
#   BENCH_RETRO_N=1000000        vectors indexed
#   BENCH_RETRO_QUERIES=1000     queries
#   BENCH_RETRO_INDEX_ARGS=""    more bench_retro_index options (--nprobe 32, --ef-search 128, ...)
#   BENCH_RETRO_REPEAT=400       GPU embed: copies of the fortunes set (605 documents each)
#   BENCH_DIR=.bench             where the embedder and the database go
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: bench-retro.sh BUILD_DIR}" && pwd)
work=${BENCH_DIR:-$root/.bench}/retro
n=${BENCH_RETRO_N:-1000000}
queries=${BENCH_RETRO_QUERIES:-1000}
repeat=${BENCH_RETRO_REPEAT:-400}
gpu=0
if grep -q "^MEG_CUDA:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null && nvidia-smi >/dev/null 2>&1; then gpu=1; fi
export PATH="$build/bin:$PATH"
for t in bin/meg-blend bin/meg-index bin/meg-pretrain bin/meg-retro-build tests/bench_retro_index; do
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
# embed DATA DEVICE: the embed stage over DATA on DEVICE (its default precision and batch); prints
# the stage's chunks per second, the GFLOP/s they imply and the chunks.
embed() {
  rm -rf "$work/db-$2"
  meg-retro-build -q --data "$1" --load "$work/embedder" --out "$work/db-$2" --stages db,embed --chunk-length 64 \
    --pad-id 50256 --device "$2"
  python3 - "$work/db-$2/embed/stage.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
# Forward FLOPs a chunk: 2 per weight of the 12 blocks (12 * 12 * 768^2 weights) per token, and the
# attention's 2 * 2 * 64 * 768 per token over 64 positions (causal half ignored), 64 tokens.
flops = 64 * (2 * 12 * 12 * 768 ** 2 + 12 * 4 * 64 * 768)
print("%.1f %.1f %d" % (s["chunks_per_second"], s["chunks_per_second"] * flops / 1e9, s["chunks"]))
PY
}
read -r rate gflops chunks <<<"$(embed "$data" cpu)"
rows=("| embed: gpt2-124m, $chunks chunks of 64 tokens, CPU fp32, chunks/s ($gflops GFLOP/s) | $rate | - | - |")
index_args=()
if [ $gpu = 1 ]; then
  meg-index -q --merge -o "$work/repeated" $(yes "$data" | head -n "$repeat")
  read -r rate gflops chunks <<<"$(embed "$work/repeated" cuda)"
  for ref in "800 (bf16 cuBLAS 8192^3)" "989 (H100 bf16 dense peak)"; do
    rows+=("| embed: gpt2-124m, $chunks chunks of 64 tokens, GPU bf16, batch 256, TFLOP/s ($rate chunks/s) \
| $(awk "BEGIN { printf \"%.1f\", $gflops / 1000 }") | $ref | $(awk "BEGIN { printf \"%.2f\", $gflops / 1000 / ${ref%% *} }") |")
  done
  index_args=(--device cuda)
fi
{
  echo "| benchmark | measured | reference | ratio |"
  echo "|---|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  "$build/tests/bench_retro_index" -q --n "$n" --queries "$queries" "${index_args[@]}" ${BENCH_RETRO_INDEX_ARGS:-}
} | tee "$out"
