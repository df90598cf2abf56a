#!/usr/bin/env bash
# Hugging Face architectures against PyTorch transformers, both ways: scripts/check-hf-archs.py
# makes a small random model of each architecture meg imports (Llama 3.1's llama3 and linear RoPE
# scaling, Llama with biases and head_dim, Qwen2, Qwen3, Mistral without and with a sliding
# window); each is imported with
# `meg-ckpt-convert --from hf`, scored by meg-eval on every device (fp32), and exported again with
# `--to hf`. scripts/check-hf-eval.py then recomputes every score with AutoModelForCausalLM on the
# original files (NAME-import: meg computes transformers' model) and on meg's export (NAME-export:
# the export loads in transformers as the same model), within 1e-4, and scripts/check-hf-generate.py
# requires meg-generate's greedy completions of each imported model to equal generate()'s on the
# original files. Needs python3 with torch, transformers and sentencepiece; no network.
#   bash scripts/check-hf-archs.sh BUILD_DIR [DEVICES]     DEVICES: default "cuda cpu" with a GPU, else "cpu"
set -euo pipefail
source "$(dirname "$0")/check-hf-lib.sh"
check_hf_setup check-hf-archs "${1:-}" "${2:-}" meg-eval meg-generate
spm=$data/megatron/fortunes_spm.model
python3 "$here/check-hf-archs.py" made "$spm"
for dir in made/*/; do
  name=$(basename "$dir")
  "$bin/meg-ckpt-convert" -q --from hf "$dir/hf" --save "$name.ckpt" --verify
  mkdir -p "$name-import/runs" "$name-export"
  cp -r "$dir/hf" "$name-import/hf"
  "$bin/meg-ckpt-convert" -q --load "$name.ckpt" --to hf --tokenizer "$spm" --save "$name-export/hf" --verify
  for device in $devices; do
    for t in "text perplexity" "lambada lambada" "arc multiple-choice"; do
      set -- $t
      "$bin/meg-eval" -q --device "$device" --precision fp32 --load "$name.ckpt" --task "$data/eval/$1.jsonl" \
        --task-type "$2" --batch 4 --json --per-example "$name-import/runs/$1-$device.per.jsonl" \
        > "$name-import/runs/$1-$device.json"
    done
  done
  cp -r "$name-import/runs" "$name-export/runs"
  python3 "$here/check-hf-generate.py" prompts "$dir/hf" > "$dir/prompts.jsonl"
  for device in $devices; do
    "$bin/meg-generate" -q --device "$device" --precision fp32 --load "$name.ckpt" --batch 5 --max-tokens 40 \
      --prompts "$dir/prompts.jsonl" -o "$dir/meg-$device.jsonl"
  done
done
python3 "$here/check-hf-eval.py" "$PWD"
python3 "$here/check-hf-generate.py" compare made
