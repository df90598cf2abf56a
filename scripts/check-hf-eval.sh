#!/usr/bin/env bash
# meg-eval's log-likelihoods against PyTorch transformers: trains a small GPT-2 (GPT-2 tokenizer)
# and a small Llama (SentencePiece) briefly with meg-pretrain, exports each with
# `meg-ckpt-convert --to hf` (tokenizer included), scores the test tasks with meg-eval (--json,
# --per-example) on each device, then scripts/check-hf-eval.py recomputes every request's
# log-likelihood with AutoModelForCausalLM in fp32 and requires them within 1e-4, and the text
# requests' tokens to be the reference tokenizer's as lm-evaluation-harness encodes them.
# Needs python3 with torch and transformers (and sentencepiece); no network.
#   bash scripts/check-hf-eval.sh BUILD_DIR [DEVICES]     DEVICES: default "cuda cpu" with a GPU, else "cpu"
set -euo pipefail
source "$(dirname "$0")/check-hf-lib.sh"
check_hf_setup check-hf-eval "${1:-}" "${2:-}" meg-eval
out=$scratch

# NAME PRESET DATASET TOKENIZER [MERGES]: a model trained for a few steps (its predictions no
# longer uniform), exported with its tokenizer, and scored on every task on every device.
evaluate_model() {
  local name=$1 dataset=$3
  train_and_export "$@"
  mkdir -p "$name/runs"
  local tasks=("lambada lambada" "hellaswag multiple-choice" "arc multiple-choice" "piqa multiple-choice"
               "openbookqa multiple-choice" "choices multiple-choice" "text perplexity" "wikitext perplexity")
  for device in $devices; do
    # In fp32 on every device, as the reference computes.
    local score=("$bin/meg-eval" -q --device "$device" --precision fp32 --load "$name/ckpt")
    for t in "${tasks[@]}"; do
      set -- $t
      "${score[@]}" --task "$data/eval/$1.jsonl" --task-type "$2" \
        --batch 4 --json --per-example "$name/runs/$1-$device.per.jsonl" > "$name/runs/$1-$device.json"
    done
    # Few-shot prompts longer than the model's 64 tokens: contexts cut from the left.
    "${score[@]}" --task "$data/eval/arc.jsonl" --task-type multiple-choice \
      --num-fewshot 3 --json --per-example "$name/runs/arc3-$device.per.jsonl" > "$name/runs/arc3-$device.json"
    # The training data itself, an indexed dataset.
    "${score[@]}" --task "${dataset}" --task-type perplexity --limit 30 \
      --json --per-example "$name/runs/indexed-$device.per.jsonl" > "$name/runs/indexed-$device.json"
  done
}

evaluate_model gpt2 tiny "$data/megatron/fortunes_gpt2" "$data/gpt2/vocab.json" "$data/gpt2/merges.txt"
evaluate_model llama tiny-llama "$data/megatron/fortunes_spm" "$data/megatron/fortunes_spm.model"
python3 "$here/check-hf-eval.py" "$out"
