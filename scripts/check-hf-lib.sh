# What scripts/check-hf-eval.sh and scripts/check-hf-generate.sh share (sourced, after `set -euo
# pipefail`): their arguments, checks of what they need, a scratch folder, and small models
# trained briefly and exported to Hugging Face.
#   check_hf_setup NAME "$@" TOOL...   sets build, bin, devices, here, data; cd's into a scratch folder
#   train_and_export NAME PRESET DATASET TOKENIZER [MERGES]   NAME/ckpt and NAME/hf, tokenizer included

check_hf_setup() {
  local name=$1 build_arg=${2:-} devices_arg=${3:-}
  shift 3 || { echo "usage: scripts/$name.sh BUILD_DIR [DEVICES]" >&2; exit 1; }
  [ -n "$build_arg" ] || { echo "usage: scripts/$name.sh BUILD_DIR [DEVICES]" >&2; exit 1; }
  build=$(cd "$build_arg" && pwd)
  bin=$build/bin
  if [ -n "$devices_arg" ]; then devices=$devices_arg
  elif nvidia-smi >/dev/null 2>&1; then devices="cuda cpu"
  else devices=cpu
  fi
  for tool in meg-blend meg-pretrain meg-ckpt-convert "$@"; do
    [ -x "$bin/$tool" ] || { echo "$name: $bin/$tool is missing (build the tools first)" >&2; exit 1; }
  done
  python3 -c "import torch, transformers" 2>/dev/null ||
    { echo "$name: python3 lacks torch or transformers" >&2; exit 1; }
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  data=$here/../tests/data
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  cd "$scratch"
}

# A model trained for a few steps (its predictions no longer uniform) on the CPU, then exported.
train_and_export() {
  local name=$1 preset=$2 dataset=$3 tokenizer=$4 merges=${5:-}
  tok=(--tokenizer "$tokenizer")
  [ -n "$merges" ] && tok+=(--merges "$merges")
  mkdir -p "$name"
  "$bin/meg-blend" -q --seq-length 64 --samples 4000 -o "$name/run.blend" 1 "$dataset"
  "$bin/meg-pretrain" -q --device cpu --model "$preset" --data "$name/run.blend" "${tok[@]}" --micro-batch 8 \
    --global-batch 16 --lr 3e-3 --warmup-iters 10 --iters 200 --save "$name/ckpt"
  "$bin/meg-ckpt-convert" -q --load "$name/ckpt" --to hf "${tok[@]}" --save "$name/hf"
}
