#!/usr/bin/env python3
"""Loads meg's Hugging Face exports in PyTorch transformers and compares the logits with meg's.

    python3 scripts/check-hf-export.py DIR

DIR is what `hf_export_check DIR` writes (tests/tools/hf_export_check.cpp): for each family
(gpt2, llama, llama3, qwen2, qwen3) a folder with hf/ (the exported model), meta.json (batch,
seq, vocab, tokens) and logits.bin (meg's float32 logits [batch, seq, vocab]). Each model is loaded from local files only
in float32, run on the same tokens, and its logits must be within 1e-3 of meg's (max abs
difference). The script also saves each model again with save_pretrained and says whether
transformers writes the same model.safetensors bytes as meg (informative: versions differ).
Exit status 0 when every family passes, 1 otherwise.
"""
import json
import os
import struct
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

TOLERANCE = 1e-3


def load_model(path):
    kwargs = dict(torch_dtype=torch.float32, local_files_only=True)
    try:  # the plain attention path: no fused kernel between us and the math
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", **kwargs)
    except (TypeError, ValueError):
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def read_logits(path, count):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 4 * count:
        raise SystemExit(f"{path}: {len(data)} bytes, expected {4 * count}")
    return torch.tensor(struct.unpack(f"<{count}f", data), dtype=torch.float32)


def check(family_dir):
    with open(os.path.join(family_dir, "meta.json")) as f:
        meta = json.load(f)
    batch, seq, vocab = meta["batch"], meta["seq"], meta["vocab"]
    hf_dir = os.path.join(family_dir, "hf")
    model = load_model(hf_dir).eval()
    tokens = torch.tensor(meta["tokens"], dtype=torch.long).view(batch, seq)
    with torch.no_grad():
        theirs = model(tokens).logits.float()
    if tuple(theirs.shape) != (batch, seq, vocab):
        print(f"{family_dir}: transformers' logits have shape {tuple(theirs.shape)}, "
              f"expected {(batch, seq, vocab)}")
        return False
    ours = read_logits(os.path.join(family_dir, "logits.bin"), batch * seq * vocab).view(batch, seq, vocab)
    diff = (theirs - ours).abs().max().item()
    ok = diff < TOLERANCE
    print(f"{os.path.basename(family_dir)}: {type(model).__name__}, logits [{batch}, {seq}, {vocab}], "
          f"max |transformers - meg| = {diff:.3g} ({'ok' if ok else 'FAIL'}: bound {TOLERANCE})")

    with tempfile.TemporaryDirectory() as saved:
        model.save_pretrained(saved, safe_serialization=True)
        ours_file = os.path.join(hf_dir, "model.safetensors")
        theirs_file = os.path.join(saved, "model.safetensors")
        if os.path.exists(ours_file) and os.path.exists(theirs_file):
            with open(ours_file, "rb") as a, open(theirs_file, "rb") as b:
                same = a.read() == b.read()
            print(f"  save_pretrained writes {'the same' if same else 'different'} model.safetensors bytes "
                  f"(transformers {transformers.__version__})")
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = sys.argv[1]
    families = sorted(d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "meta.json")))
    if not families:
        raise SystemExit(f"{root}: no exported models (run hf_export_check {root} first)")
    torch.manual_seed(0)
    results = [check(os.path.join(root, d)) for d in families]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
