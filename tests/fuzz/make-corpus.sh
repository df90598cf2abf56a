#!/usr/bin/env bash
# Makes the fuzz targets' seeds (tests/fuzz/corpus/NAME/) and fixtures (tests/fuzz/fixtures/) with
# the real tools of a build, from the texts of tests/data. Run it again when a format changes:
#   bash tests/fuzz/make-corpus.sh BUILD/bin
# Seeds are small on purpose: libFuzzer mutates short inputs many times faster.
set -euo pipefail

bin=$(cd "${1:?usage: make-corpus.sh BUILD/bin}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
data="$here/../data"
corpus="$here/corpus"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PATH="$bin:$PATH" LC_ALL=C.UTF-8
rm -rf "$corpus" "$here/fixtures"
mkdir -p "$corpus"/{token_stream,indexed_dataset,blend,safetensors,checkpoint,hf_config,jsonl_documents,eval_task,prompts,metrics,spm_model,regex} \
         "$here/fixtures"
gpt2=(--tokenizer "$data/gpt2/vocab.json" --merges "$data/gpt2/merges.txt")

# Documents: a few short texts of the GPT-2 parity file, in several scripts.
python3 - "$data/gpt2/parity.jsonl" "$work/docs.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
short = [r["text"] for r in rows if 0 < len(r["text"]) < 120]
picked = short[::max(1, len(short) // 24)][:24]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for t in picked:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
PY
head -c 1500 "$work/docs.jsonl" > "$corpus/jsonl_documents/docs.jsonl"
printf '{"text": "a\\u00e9\\ud83d\\ude00", "id": 3, "meta": {"x": [1, 2.5e3, null, true]}}\n\n{"text": ""}\n{"text": 5}\n' \
  > "$corpus/jsonl_documents/kinds.jsonl"

# Token streams: plain, with end-of-document tokens, compressed, and two concatenated.
meg-tokenize -q "${gpt2[@]}" -o "$work/a.tok" "$work/docs.jsonl"
head -n 4 "$work/docs.jsonl" | meg-tokenize -q "${gpt2[@]}" --append-eod -o "$corpus/token_stream/eod.tok"
head -n 3 "$work/docs.jsonl" | meg-tokenize -q "${gpt2[@]}" --zstd -o "$corpus/token_stream/small.tok.zst"
head -n 2 "$work/docs.jsonl" | meg-tokenize -q "${gpt2[@]}" -o "$work/b.tok"
cat "$work/b.tok" "$work/b.tok" > "$corpus/token_stream/concatenated.tok"
cp "$work/b.tok" "$corpus/token_stream/two.tok"

# Indexed datasets: u32 size of the .idx, the .idx, the .bin (fuzz_indexed_dataset.cpp).
pack_dataset() {
  python3 - "$1.idx" "$1.bin" "$2" <<'PY'
import struct, sys
idx, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
open(sys.argv[3], "wb").write(struct.pack("<I", len(idx)) + idx + b)
PY
}
meg-index -q -o "$work/two" "$work/b.tok"
pack_dataset "$work/two" "$corpus/indexed_dataset/two-documents"
head -n 6 "$work/docs.jsonl" | meg-tokenize -q "${gpt2[@]}" --append-eod | meg-index -q -o "$work/six"
pack_dataset "$work/six" "$corpus/indexed_dataset/six-documents"

# The blend target's dataset, and blends of it (names relative to the blend's directory).
meg-index -q -o "$here/fixtures/d" "$work/a.tok"
(cd "$here/fixtures" &&
  meg-blend -q --seq-length 16 --samples 12 --valid-samples 2 --test-samples 1 --split 8,1,1 -o "$corpus/blend/d.blend" 1 d &&
  meg-blend -q --seq-length 7 --samples 20 --split 1,0,0 -o "$corpus/blend/twice.blend" 0.5 d 0.5 d)

# Safetensors: a few tensors of several dtypes with metadata, and an empty file of tensors.
python3 - "$corpus/safetensors" <<'PY'
import json, struct, sys, math
def write(path, tensors, metadata=None):
    header, data = {}, b""
    if metadata: header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
f32 = struct.pack("<6f", *[math.sin(i) for i in range(6)])
bf16 = b"".join(struct.pack("<f", 0.5 * i)[2:] for i in range(4))
f16 = struct.pack("<4e", 1.0, -2.0, 0.25, 65504.0)
write(sys.argv[1] + "/mixed.safetensors",
      {"w": ("F32", [2, 3], f32), "b": ("BF16", [4], bf16), "h": ("F16", [2, 2], f16), "i": ("I64", [1], struct.pack("<q", 7))},
      {"format": "pt"})
write(sys.argv[1] + "/scalar.safetensors", {"s": ("F32", [], struct.pack("<f", 3.0)), "e": ("F32", [0], b"")})
PY

# A checkpoint record, and Hugging Face configs (GPT-2 matches the fixture's tensors; Llama does not).
cp "$data/checkpoints/gpt/checkpoint.json" "$corpus/checkpoint/gpt.json"
cp "$data/checkpoints/gpt-hf/config.json" "$corpus/hf_config/gpt2.json"
cp "$data/checkpoints/llama-tp2-hf/config.json" "$corpus/hf_config/llama.json"

# Eval tasks: the type byte (0 perplexity, 1 lambada, 2 multiple choice), then a few lines.
task_seed() { { printf "\\x$(printf %02x "$1")"; head -n "$3" "$data/eval/$2"; } > "$corpus/eval_task/$2"; }
task_seed 0 text.jsonl 4
task_seed 0 wikitext.jsonl 2
task_seed 1 lambada.jsonl 4
task_seed 2 hellaswag.jsonl 3
task_seed 2 arc.jsonl 3
task_seed 2 piqa.jsonl 3

# Prompts: text and ids, with the per-prompt settings.
cat > "$corpus/prompts/prompts.jsonl" <<'JSONL'
{"prompt": "Once upon a time"}
{"prompt": "x", "max_tokens": 3, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "repetition_penalty": 1.1, "seed": 4, "stop": ["\n", "."]}

{"prompt_ids": [464, 2068, 7586], "stop": "end"}
JSONL

# Metrics: train and valid records as meg-pretrain writes them (a resumed run repeating
# iteration 2), and records of a file written before records had a "split".
cat > "$corpus/metrics/metrics.jsonl" <<'JSONL'
{"iteration":1,"split":"train","consumed_tokens":256,"loss":7.6061,"lr":0.001,"grad_norm":1.64,"ms_per_iter":41.2,"tokens_per_s":6221.8,"model_tflops_per_gpu":0.009}
{"iteration":2,"split":"train","consumed_tokens":512,"loss":7.5941,"lr":0.002,"grad_norm":1.94,"ms_per_iter":40.1,"tokens_per_s":6384.0,"peak_memory_bytes":1048576,"model_tflops_per_gpu":0.009}
{"iteration":2,"split":"valid","valid_loss":7.0236,"valid_ppl":1122.9}
{"iteration":2,"split":"train","consumed_tokens":512,"loss":7.5941,"lr":0.002,"grad_norm":1.94,"ms_per_iter":40.3,"tokens_per_s":6352.2,"model_tflops_per_gpu":0.009}
JSONL
cat > "$corpus/metrics/old.jsonl" <<'JSONL'
{"iteration": 10, "consumed_tokens": 1280, "loss": 6.9, "lr": 0.001, "grad_norm": 1.2}
{"iteration": 10, "valid_loss": 6.8, "valid_ppl": 900.2}
{"iteration": 20, "consumed_tokens": 2560, "loss": 0.0, "lr": 0.001, "grad_norm": 1.2}
JSONL

# SentencePiece models: BPE, unigram and BPE with byte fallback, trained on the documents with
# small vocabularies and no normalization table (which alone is 240 KB): spm_train, the library's
# own trainer, so that the seeds do not depend on meg's training options.
python3 -c "import json,sys; [print(json.loads(l)['text'].replace('\n',' ')) for l in open(sys.argv[1])]" "$work/docs.jsonl" > "$work/docs.txt"
spm() {
  spm_train --input="$work/docs.txt" --model_prefix="$work/$1" --vocab_size="$2" --model_type="$3" \
    --normalization_rule_name=identity --minloglevel=2 "${@:4}" 2>/dev/null
  cp "$work/$1.model" "$corpus/spm_model/$1.model"
}
spm bpe 150 bpe
spm unigram 150 unigram
spm bytes 400 bpe --byte_fallback=true

# Regex patterns of real tokenizer.json pre-tokenizers (and simple ones), each with a NUL and a
# text of several scripts, spaces, newlines and contractions.
python3 - "$corpus/regex" <<'PY'
import sys
patterns = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "cl100k": r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "deepseek_digits": r"\p{N}{1,3}",
    "deepseek_cjk": "[\u4e00-\u9fa5\\u3040-\u309f\u30a0-\u30ff]+",
    "deepseek": r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "space": " ", "whitespace": r"\s+", "digit": r"\d", "bert": r"\w+|[^\w\s]+", "punctuation": r"[\p{P}]",
    "constructs": r"(?>a+|b)c*?(?=d)|^x{2,3}$|\bq\B|(?:ab){1,3}+|[^\x{4e00}-\x{9fa5}\t]??\Aé\z",
}
text = "I'M   here\n\n 12345 don't\r\n\tCaf\u00e9 \u03a9\u03bc\u00e9\u03b3\u03b1 \u6771\u4eac\u306e\u30c6\u30ad\u30b9\u30c8 \U0001F600!! x//y \u00a0\u3000end  "
for name, pattern in patterns.items():
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(pattern.encode() + b"\0" + text.encode())
PY

du -sh "$corpus" "$here/fixtures" >&2
