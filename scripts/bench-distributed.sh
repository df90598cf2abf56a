#!/usr/bin/env bash
# Distributed training throughput on a CUDA machine with several GPUs: meg-pretrain under mpirun
# (bf16, random-order samples of the fortunes corpus), one row per layout, with the time each
# iteration spends in NCCL (--time-communication). Figures are medians over the iterations after
# the first WARMUP; MFU is model FLOPs (6 N + 12 L d T per token) per GPU against the H100/H200's
# 989 TFLOP/s dense bf16 peak. Layouts needing more GPUs than are visible are skipped.
#   scripts/bench-distributed.sh BUILD_DIR [GROUP ...]     groups: gpt2-355m gpt2-1.4b llama-8b
# GROUP may also be GROUP:LAYOUT-SUBSTRING to run only the matching rows (gpt2-1.4b:sequence).
# A markdown table on stdout; the logs and metrics under OUT_DIR (default .bench/distributed).
set -uo pipefail
build=${1:-build}
shift || true
groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(gpt2-355m gpt2-1.4b llama-8b)
out=${OUT_DIR:-.bench/distributed}
warmup=${WARMUP:-3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export PATH="$build/bin:$PATH"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
data=tests/data/megatron/fortunes_gpt2

blend() {  # blend SEQ: a blend of the corpus at sequence length SEQ, repeated as needed
  local b=$out/fortunes-$1.blend
  [ -f "$b" ] || meg-blend -q --seq-length "$1" --samples 4000 -o "$b" 1 "$data" || exit 1
  echo "$b"
}

printf '| model | layout | GPUs | micro-batch x seq | tokens/s | per GPU | of linear | model TFLOP/s per GPU | MFU | comm ms/iter | ms/iter | peak memory |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
declare -A base  # tokens/s per GPU on one GPU, by model

# run MODEL LAYOUT NP MICRO SEQ GLOBAL ITERS ARGS...: one row.
run() {
  local model=$1 layout=$2 np=$3 micro=$4 seq=$5 global=$6 iters=$7
  shift 7
  [[ "$layout" == *"$only"* ]] || return 0
  if [ "$np" -gt "$gpus" ]; then
    printf '| %s | %s | %s | skipped: %s GPU(s) visible |\n' "$model" "$layout" "$np" "$gpus"
    return
  fi
  local name="$model-${layout// /_}-$np" metrics
  metrics=$out/$name.jsonl
  rm -f "$metrics"
  mpirun "${root[@]}" -np "$np" -x NCCL_NVLS_ENABLE -x PATH \
    meg-pretrain --device cuda --data "$(blend "$seq")" --micro-batch "$micro" --global-batch "$global" \
    --iters "$iters" --log-interval 1 --lr 1e-4 --warmup-iters 1 --time-communication --metrics "$metrics" "$@" \
    >"$out/$name.log" 2>&1 || { printf '| %s | %s | %s | FAILED: %s |\n' "$model" "$layout" "$np" \
                                 "$(tail -n 1 "$out/$name.log")"; return; }
  python3 - "$metrics" "$warmup" "$model" "$layout" "$np" "$micro x $seq" "${base[$model]:-0}" <<'PY'
import json, statistics, sys
path, warmup, model, layout, np, shape, base = sys.argv[1:]
rows = [r for r in map(json.loads, open(path)) if r["split"] == "train"]
rows = [r for r in rows if r["iteration"] > int(warmup)] or rows
med = lambda k: statistics.median(r[k] for r in rows)
tps, np, base = med("tokens_per_s"), int(np), float(base)
per_gpu = tps / np
linear = f"{100 * per_gpu / base:.1f}%" if base > 0 and np > 1 else "-"
tflops = med("model_tflops_per_gpu")
comm = med("comm_ms_per_iter") if "comm_ms_per_iter" in rows[0] else 0
peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
print(f"| {model} | {layout} | {np} | {shape} | {tps / 1e3:.1f}k | {per_gpu / 1e3:.1f}k | {linear} | {tflops:.0f} | "
      f"{100 * tflops / 989:.1f}% | {comm:.1f} | {med('ms_per_iter'):.0f} | {peak:.1f} GiB |")
print(per_gpu, file=open(path + ".per_gpu", "w"))
PY
  [ "$np" -eq 1 ] && base[$model]=$(cat "$metrics.per_gpu")
}

for spec in "${groups[@]}"; do
  group=${spec%%:*}
  only=""
  [[ "$spec" == *:* ]] && only=${spec#*:}
  case $group in
    gpt2-355m)
      for np in 1 2 4; do run gpt2-355m "DP=$np" $np 16 1024 $((16 * np)) 20 --model gpt2-355m; done
      run gpt2-355m "DP=4, distributed optimizer" 4 16 1024 64 20 --model gpt2-355m --use-distributed-optimizer ;;
    gpt2-1.4b)
      # GPT-2 1.56B's 25 heads split over neither 2 nor 4 ranks: the same depth with 24 heads of 64.
      shape=(--model gpt2-1.5b --hidden-size 1536 --num-heads 24 --ffn-hidden-size 6144)
      run gpt2-1.4b "one GPU" 1 8 1024 16 12 "${shape[@]}"
      run gpt2-1.4b "TP=2" 2 8 1024 16 12 "${shape[@]}" --tp 2
      run gpt2-1.4b "TP=4" 4 8 1024 16 12 "${shape[@]}" --tp 4
      run gpt2-1.4b "TP=4, sequence parallel" 4 8 1024 16 12 "${shape[@]}" --tp 4 --sequence-parallel ;;
    llama-8b)
      run llama-8b "TP=4" 4 2 4096 8 8 --model llama-8b --tp 4
      run llama-8b "TP=4, sequence parallel" 4 2 4096 8 8 --model llama-8b --tp 4 --sequence-parallel
      run llama-8b "TP=2 x PP=2" 4 2 4096 8 8 --model llama-8b --tp 2 --pp 2
      run llama-8b "TP=2 x PP=2, 2 virtual stages" 4 2 4096 8 8 --model llama-8b --tp 2 --pp 2 --virtual-stages 2 ;;
    *) echo "unknown group $group" >&2; exit 1 ;;
  esac
done
