#!/usr/bin/env bash
# meg's exported tokenizers in transformers: for each tokenizer.json family of
# tests/data/hf-tokenizers, a SentencePiece model that meg-tokenize --train makes (its defaults; the
# export writes its tokenizer.json) and the GPT-2 tokenizer, a small model is
# trained for two steps with it and exported (meg-ckpt-convert --to hf); then AutoTokenizer on the
# folder must give meg-tokenize's ids for every parity text (without and with special tokens), and
# pipeline("text-generation") must run on it. Needs python3 with torch and transformers.
#   bash scripts/check-hf-tokenizer.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/check-hf-lib.sh"
check_hf_setup check-hf-tokenizer "${1:-}" cpu meg-tokenize meg-index
fixtures=$data/hf-tokenizers
grep -v '"text": ""' "$fixtures/texts.jsonl" | python3 -c "
import json, sys
for l in sys.stdin:
    if json.loads(l)['text'].strip(): sys.stdout.write(l)" > texts.jsonl
pairs=()
for f in gpt2 llama3 qwen2 neox tekken spm metaspace wordpiece; do pairs+=("$f:$fixtures/$f/tokenizer.json:"); done
cat "$data/megatron/fortunes_fixture.jsonl" texts.jsonl texts.jsonl > spm-train.jsonl
"$bin/meg-tokenize" -q --train --vocab-size 1200 -o meg-spm.model spm-train.jsonl
pairs+=("meg-spm:$PWD/meg-spm.model:" "meg-gpt2:$data/gpt2/vocab.json:$data/gpt2/merges.txt")
status=0
for p in "${pairs[@]}"; do
  IFS=: read -r name tokenizer merges <<< "$p"
  tok=(--tokenizer "$tokenizer")
  [ -n "$merges" ] && tok+=(--merges "$merges")
  mkdir -p "$name"
  for special in add no-add; do
    "$bin/meg-tokenize" -q "${tok[@]}" "--$special-special-tokens" texts.jsonl | "$bin/meg-index" -q -o "$name/$special"
  done
  for _ in $(seq 20); do cat texts.jsonl; done > "$name/train.jsonl"
  "$bin/meg-tokenize" -q "${tok[@]}" --append-eod "$name/train.jsonl" | "$bin/meg-index" -q -o "$name/train"
  "$bin/meg-blend" -q --seq-length 32 --samples 64 -o "$name/run.blend" 1 "$name/train" 2>/dev/null
  "$bin/meg-pretrain" -q --device cpu --model tiny-llama --data "$name/run.blend" "${tok[@]}" --micro-batch 4 \
    --lr 1e-3 --iters 2 --save "$name/ckpt"
  "$bin/meg-ckpt-convert" -q --load "$name/ckpt" --to hf --save "$name/hf"
  python3 - "$name" texts.jsonl <<'PY' || status=1
import json, sys, warnings
import numpy as np
from transformers import AutoTokenizer, pipeline
warnings.filterwarnings("ignore")
name, texts = sys.argv[1], [json.loads(l)["text"] for l in open(sys.argv[2])]
def meg_ids(prefix):  # the documents of a dataset, by its .idx
    idx = open(f"{prefix}.idx", "rb").read()
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}[idx[17]]
    n = int(np.frombuffer(idx, np.int64, 1, 18)[0])
    sizes = np.frombuffer(idx, np.int32, n, 34)
    tokens = np.fromfile(f"{prefix}.bin", dtype)
    out, at = [], 0
    for s in sizes:
        out.append(tokens[at:at + s].tolist()); at += s
    return out
tok = AutoTokenizer.from_pretrained(f"{name}/hf", local_files_only=True)
bad = 0
for special, add in (("add", True), ("no-add", False)):
    for i, (t, ids) in enumerate(zip(texts, meg_ids(f"{name}/{special}"))):
        hf = tok.encode(t, add_special_tokens=add)
        if hf != ids:
            bad += 1
            if bad <= 3: print(f"  {name}: text {i} ({special} special tokens): transformers {hf[:12]} meg {ids[:12]}")
generator = pipeline("text-generation", model=f"{name}/hf", tokenizer=tok, device="cpu")
out = generator("Hello", max_new_tokens=4, do_sample=False)[0]["generated_text"]
print(f"{name}: {type(tok).__name__}: {2 * len(texts) - bad}/{2 * len(texts)} texts with meg's ids; "
      f"pipeline: {out!r}")
sys.exit(1 if bad else 0)
PY
done
exit $status
