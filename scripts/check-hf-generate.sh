#!/usr/bin/env bash
# meg-generate's greedy output against PyTorch transformers' generate: trains a small GPT-2 (GPT-2
# tokenizer) and a small Llama (SentencePiece) briefly with meg-pretrain, exports each with
# `meg-ckpt-convert --to hf`, generates greedily from the same token-id prompts with meg-generate
# (--prompts with "prompt_ids", several slots at once) on each device in fp32, then
# scripts/check-hf-generate.py runs `generate` (greedy, fp32, one prompt at a time) and requires
# the same tokens, and the same tokens on every device. Needs python3 with torch and transformers.
#   bash scripts/check-hf-generate.sh BUILD_DIR [DEVICES]   DEVICES: default "cuda cpu" with a GPU, else "cpu"
set -euo pipefail
build=$(cd "${1:?usage: scripts/check-hf-generate.sh BUILD_DIR [DEVICES]}" && pwd)
bin=$build/bin
if [ $# -ge 2 ]; then devices=$2; elif nvidia-smi >/dev/null 2>&1; then devices="cuda cpu"; else devices=cpu; fi
for tool in meg-blend meg-pretrain meg-ckpt-convert meg-generate; do
  [ -x "$bin/$tool" ] || { echo "check-hf-generate: $bin/$tool is missing (build the tools first)" >&2; exit 1; }
done
python3 -c "import torch, transformers" 2>/dev/null ||
  { echo "check-hf-generate: python3 lacks torch or transformers" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../tests/data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"

# NAME PRESET DATASET TOKENIZER [MERGES]: a model trained for a few steps, exported with its
# tokenizer, and its greedy completions of prompts of random token ids on every device.
generate_model() {
  local name=$1 preset=$2 dataset=$3 tokenizer=$4 merges=${5:-}
  local tok=(--tokenizer "$tokenizer")
  [ -n "$merges" ] && tok+=(--merges "$merges")
  mkdir -p "$name"
  "$bin/meg-blend" -q --seq-length 64 --samples 4000 -o "$name/run.blend" 1 "$dataset"
  "$bin/meg-pretrain" -q --device cpu --model "$preset" --data "$name/run.blend" "${tok[@]}" --micro-batch 8 \
    --global-batch 16 --lr 3e-3 --warmup-iters 10 --iters 150 --save "$name/ckpt"
  "$bin/meg-ckpt-convert" -q --load "$name/ckpt" --to hf "${tok[@]}" --save "$name/hf"
  python3 "$here/check-hf-generate.py" prompts "$name/hf" > "$name/prompts.jsonl"
  for device in $devices; do
    "$bin/meg-generate" -q --device "$device" --precision fp32 --load "$name/ckpt" --batch 5 --max-tokens 40 \
      --prompts "$name/prompts.jsonl" -o "$name/meg-$device.jsonl"
  done
}

generate_model gpt2 tiny "$data/megatron/fortunes_gpt2" "$data/gpt2/vocab.json" "$data/gpt2/merges.txt"
generate_model llama tiny-llama "$data/megatron/fortunes_spm" "$data/megatron/fortunes_spm.model"
python3 "$here/check-hf-generate.py" compare "$out"
