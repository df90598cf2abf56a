#!/usr/bin/env bash
# meg-generate's greedy output against PyTorch transformers' generate: trains a small GPT-2 (GPT-2
# tokenizer) and a small Llama (SentencePiece) briefly with meg-pretrain, exports each with
# `meg-ckpt-convert --to hf`, generates greedily from the same token-id prompts with meg-generate
# (--prompts with "prompt_ids", several slots at once) on each device in fp32, then
# scripts/check-hf-generate.py runs `generate` (greedy, fp32, one prompt at a time) and requires
# the same tokens, and the same tokens on every device. Needs python3 with torch and transformers.
#   bash scripts/check-hf-generate.sh BUILD_DIR [DEVICES]   DEVICES: default "cuda cpu" with a GPU, else "cpu"
set -euo pipefail
source "$(dirname "$0")/check-hf-lib.sh"
check_hf_setup check-hf-generate "${1:-}" "${2:-}" meg-generate
out=$scratch

# NAME PRESET DATASET TOKENIZER [MERGES]: a model trained for a few steps, exported with its
# tokenizer, and its greedy completions of prompts of random token ids on every device.
generate_model() {
  local name=$1
  train_and_export "$@"
  python3 "$here/check-hf-generate.py" prompts "$name/hf" > "$name/prompts.jsonl"
  for device in $devices; do
    "$bin/meg-generate" -q --device "$device" --precision fp32 --load "$name/ckpt" --batch 5 --max-tokens 40 \
      --prompts "$name/prompts.jsonl" -o "$name/meg-$device.jsonl"
  done
}

generate_model gpt2 tiny "$data/megatron/fortunes_gpt2" "$data/gpt2/vocab.json" "$data/gpt2/merges.txt"
generate_model llama tiny-llama "$data/megatron/fortunes_spm" "$data/megatron/fortunes_spm.model"
python3 "$here/check-hf-generate.py" compare "$out"
