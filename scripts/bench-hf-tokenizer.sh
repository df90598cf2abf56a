#!/usr/bin/env bash
# tokenizer.json throughput: meg-tokenize on one core against Hugging Face tokenizers on one core
# (its Node binding, the Rust library the Python package wraps: npm install tokenizers@0.23.2),
# timed in the same run on the same corpus, for each family of tests/data/hf-tokenizers.
#   NODE_PATH=DIR/node_modules scripts/bench-hf-tokenizer.sh BIN_DIR CORPUS.jsonl [RUNS]
# Prints a table: MB/s of text for each, and the ratio. Both encode without special tokens; meg's
# figure is the whole tool (reading the JSONL, writing the token stream), HF's the encoding alone.
set -euo pipefail
bin=${1:?usage: bench-hf-tokenizer.sh BIN_DIR CORPUS.jsonl [RUNS]}
corpus=${2:?usage: bench-hf-tokenizer.sh BIN_DIR CORPUS.jsonl [RUNS]}
runs=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
fixtures="$here/../tests/data/hf-tokenizers"
bytes=$(python3 -c "import json, sys; print(sum(len(json.loads(l)['text'].encode()) for l in open(sys.argv[1]) if l.strip()))" "$corpus")

# median_seconds COMMAND...: the median wall time of RUNS runs, after one to warm up.
median_seconds() {
  "$@" >/dev/null 2>&1
  for _ in $(seq "$runs"); do
    local start=$(date +%s%N)
    "$@" >/dev/null 2>&1
    echo $(( $(date +%s%N) - start ))
  done | sort -n | awk '{ t[NR] = $1 } END { printf "%.4f\n", t[int((NR + 1) / 2)] / 1e9 }'
}

printf '| tokenizer.json | meg MB/s | HF tokenizers MB/s | ratio |\n|---|---|---|---|\n'
for family in gpt2 llama3 qwen2 neox tekken spm metaspace wordpiece; do
  t="$fixtures/$family/tokenizer.json"
  meg=$(median_seconds "$bin/meg-tokenize" -q -w 1 --no-add-special-tokens --tokenizer "$t" -o /dev/null "$corpus")
  hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node - "$t" "$corpus" "$runs" <<'JS'
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
const [file, corpus, runs] = process.argv.slice(2);
const texts = fs.readFileSync(corpus, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).text);
const tok = Tokenizer.fromFile(file);
(async () => {
  await tok.encodeBatch(texts.slice(0, 1000), { addSpecialTokens: false });
  const times = [];
  for (let r = 0; r < Number(runs); ++r) {
    const start = process.hrtime.bigint();
    await tok.encodeBatch(texts, { addSpecialTokens: false });
    times.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  times.sort((a, b) => a - b);
  console.log(times[Math.floor((times.length - 1) / 2)].toFixed(4));
})();
JS
)
  awk -v b="$bytes" -v m="$meg" -v h="$hf" -v f="$family" \
    'BEGIN { printf "| %s | %.1f | %.1f | %.1fx |\n", f, b / 1e6 / m, b / 1e6 / h, h / m }'
done
