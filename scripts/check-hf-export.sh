#!/usr/bin/env bash
# Our Hugging Face exports in the real client: builds a small GPT-2, Llama, Llama 3.1 (RoPE
# scaling), Qwen2 and Qwen3 with meg's CPU model, writes their logits on fixed tokens and exports them (BUILD_DIR/tests/hf_export_check),
# then loads each export with PyTorch transformers and requires the same logits (fp32, max abs
# difference below 1e-3). Needs python3 with torch and transformers; no network.
#   bash scripts/check-hf-export.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/check-hf-export.sh BUILD_DIR}
check=$build/tests/hf_export_check
[ -x "$check" ] || { echo "check-hf-export: $check is missing (build the tests first)" >&2; exit 1; }
python3 -c "import torch, transformers" 2>/dev/null ||
  { echo "check-hf-export: python3 lacks torch or transformers" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$check" "$out"
python3 "$(dirname "$0")/check-hf-export.py" "$out"
