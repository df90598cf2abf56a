# meg-tokenize --train: models that keep text. Every document decodes to itself (line breaks, tabs,
# runs of spaces, characters never seen in training), every line gets the library's ids
# (spm_encode), user symbols stay whole; the library's own defaults come back by flags; bad options.
TOOLS=$(cd "$(dirname "$0")" && pwd)
source "$TOOLS/lib.sh"
if ! command -v spm_encode >/dev/null; then
  echo "training: skipped, no spm_encode (Debian package sentencepiece) to compare with"
  exit 77
fi
M=$MEG_TEST_DATA/megatron
ROUNDTRIP="python3 $TOOLS/spm_roundtrip.py"

# Training text: the fortunes, code with indentation and tabs, the user symbols in use. Test text
# adds what training never saw: emoji, CJK, Cyrillic, combining marks, compatibility characters
# (which NFKC would rewrite), odd spaces, and documents of nothing but whitespace.
python3 - "$M/fortunes_fixture.jsonl" <<'PY'
import json, sys
docs = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
code = "def f(x):\n    if x:\n        return [x,  x]\n\treturn None\n\n\n# end  \n"
chat = "<|im_start|>user\nHello  there<|im_end|>\n<|im_start|>assistant\n\tHi!<|im_end|>"
train = docs + [code] * 20 + [chat] * 20 + ["  two leading, three trailing   ", "a\tb\t\tc"] * 5
unseen = ["emoji \U0001F600\U0001F469\u200d\U0001F469\u200d\U0001F467 end", "\u4e2d\u6587\u6587\u672c\u3002\n\ud55c\uad6d\uc5b4",
          "\u0420\u0443\u0441\u0441\u043a\u0438\u0439  \u044f\u0437\u044b\u043a", "e\u0301 \u00e9 \ufb01 \u2460 \uff21\uff22 \u3000x\u00a0y\u200bz",
          " ", "   ", "\n", "\n\n\n", "\t", "x ", " x", "a\r\nb\r\n", "line\n\n\n  indented\n" + code, chat + " \U0001F600"]
with open("train.jsonl", "w") as f:
    for d in train: f.write(json.dumps({"text": d}) + "\n")
with open("test.jsonl", "w") as f:
    for d in train + unseen: f.write(json.dumps({"text": d}) + "\n")
PY

# --- The defaults keep text, for BPE and unigram models.
meg-tokenize -q --train --vocab-size 1200 --user-symbols '<|im_start|>,<|im_end|>' -o bpe.model train.jsonl
$ROUNDTRIP test.jsonl bpe.model > bpe.log || fail "BPE round trip: $(cat bpe.log)"
meg-tokenize -q --train --vocab-size 1200 --model-type unigram --user-symbols '<|im_start|>,<|im_end|>' -o uni.model train.jsonl
$ROUNDTRIP test.jsonl uni.model > uni.log || fail "unigram round trip: $(cat uni.log)"

# User symbols are single pieces wherever they are; a line break is the byte piece <0x0A>.
printf 'x<|im_start|>y<|im_end|>z\n' | spm_encode --model bpe.model --output_format=piece > pieces.txt
grep -q " <|im_start|> .* <|im_end|> " pieces.txt || fail "user symbols split: $(cat pieces.txt)"
printf '{"text": "a\\nb"}\n' > nl.jsonl
meg-tokenize -q --tokenizer bpe.model -o nl.tok nl.jsonl
newline=$(spm_export_vocab --model bpe.model | grep -n '^<0x0A>' | cut -d: -f1)
python3 -c "
import sys; sys.path.insert(0, '$TOOLS')
from spm_corrupt import meg_tokens
assert $newline - 1 in meg_tokens('nl.tok')[0]
" || fail "a line break is not the piece <0x0A>"

# Other ids, control symbols (no text encodes to them), digits split.
meg-tokenize -q --train --vocab-size 1200 --unk-id 3 --bos-id -1 --eos-id 0 --pad-id 1 --control-symbols '<mask>,<sep>' \
  --split-digits -o ids.model train.jsonl
$ROUNDTRIP test.jsonl ids.model > ids.log || fail "ids round trip: $(cat ids.log)"
printf '1234 <mask>\n' | spm_encode --model ids.model --output_format=piece | grep -q " 1 2 3 4 ▁ < m" || fail "digits split, and no text encodes to a control symbol"
meg-tokenize -q --tokenizer ids.model --append-eod train.jsonl | meg-index -q -o ids
meg-index --info --json ids | grep -q "\"documents\":$(wc -l < train.jsonl)" || fail "eos id 0 ends the documents"

# --- SentencePiece's own defaults come back by flags: runs of spaces fold, NFKC rewrites, lossy.
meg-tokenize -q --train --vocab-size 1200 --no-byte-fallback --remove-extra-whitespaces \
  --normalization-rule-name nmt_nfkc --no-allow-whitespace-only-pieces -o spm.model train.jsonl
$ROUNDTRIP test.jsonl spm.model lossy > spm.log || fail "library defaults: $(cat spm.log)"

# --- Exported for Hugging Face, a BPE model goes with a tokenizer.json of the same ids (transformers
# reads that; tokenizers reads what meg-tokenize reads): on every document, or with user symbols
# and the dummy prefix, on all but those that begin with a space or a user symbol (one line says
# so). A unigram model and a normalization table have none (one line says why).
meg-tokenize -q --train --vocab-size 1200 -o plain.model train.jsonl
meg-tokenize -q --tokenizer bpe.model --append-eod train.jsonl | meg-index -q -o bpe-train
meg-blend -q --seq-length 16 --samples 32 -o bpe.blend 1 bpe-train 2>/dev/null
meg-pretrain -q --device cpu --model tiny-llama --tokenizer bpe.model --data bpe.blend --micro-batch 2 --lr 1e-3 \
  --iters 1 --save ck
# same_ids MODEL JSON [SKIP_CAVEAT]: every document of test.jsonl gets the same ids from both.
same_ids() {
  meg-tokenize -q --tokenizer $1 -o a.tok test.jsonl
  meg-tokenize -q --tokenizer $2 -o b.tok test.jsonl
  python3 - "${3:-}" <<PY || fail "$2 encodes otherwise than $1"
import json, sys
sys.path.insert(0, '$TOOLS')
from spm_corrupt import meg_tokens
docs = [json.loads(l)["text"] for l in open("test.jsonl", encoding="utf-8")]
caveat = sys.argv[1] == "caveat"
bad = [d for d, a, b in zip(docs, meg_tokens("a.tok"), meg_tokens("b.tok")) if a != b and
       not (caveat and (d.startswith(" ") or d.startswith("<|im_")))]
print(f"{len(bad)} of {len(docs)} documents differ: {bad[:3]}") if bad else None
sys.exit(1 if bad else 0)
PY
}
for m in plain bpe uni spm; do
  meg-ckpt-convert --load ck --to hf --tokenizer $m.model --save $m-hf 2> $m-hf.log || fail "export with $m.model: $(cat $m-hf.log)"
done
same_ids plain.model plain-hf/tokenizer.json
meg-tokenize -q --tokenizer plain-hf/tokenizer.json -o json.tok test.jsonl
meg-tokenize -q --tokenizer plain-hf/tokenizer.json --decode json.tok | cmp -s - <(meg-tokenize -q --tokenizer plain.model --decode json.tok) ||
  fail "plain-hf/tokenizer.json decodes otherwise than plain.model"
grep -q '"split_special_tokens": true' plain-hf/tokenizer_config.json || fail "tokenizer_config.json: $(cat plain-hf/tokenizer_config.json)"
grep -q "tokenizer.json encodes as the model but for a text that begins with a space or a user-defined piece" bpe-hf.log ||
  fail "no caveat for user symbols: $(cat bpe-hf.log)"
same_ids bpe.model bpe-hf/tokenizer.json caveat
grep -q "no tokenizer.json written (a unigram model)" uni-hf.log || fail "unigram export: $(cat uni-hf.log)"
grep -q "no tokenizer.json written (its normalization table (nmt_nfkc))" spm-hf.log || fail "nmt_nfkc export: $(cat spm-hf.log)"
[ ! -e uni-hf/tokenizer.json ] && [ ! -e spm-hf/tokenizer.json ] && grep -q '"LlamaTokenizer"' uni-hf/tokenizer_config.json ||
  fail "a tokenizer.json that does not encode as the model: $(ls uni-hf spm-hf)"

# --- The demo corpus (Debian's fortunes), all of it.
if [ -d /usr/share/games/fortunes ]; then
  bash "$TOOLS/../../scripts/demo-corpus.sh" demo
  cat demo/tech.jsonl demo/general.jsonl > demo.jsonl
  meg-tokenize -q --train --vocab-size 8000 -o demo.model demo.jsonl
  $ROUNDTRIP demo.jsonl demo.model > demo.log || fail "demo corpus: $(cat demo.log)"
  echo "demo corpus: $(cat demo.log)"
else
  echo "demo corpus: skipped (no /usr/share/games/fortunes)"
fi

# --- Bad options: one line, no model.
expect_fail 1 "^meg-tokenize: --control-symbols: \"X\" is a single character" -- \
  meg-tokenize -q --train --vocab-size 1200 --control-symbols X -o bad.model train.jsonl
expect_fail 1 "^meg-tokenize: bad.model: training failed: " -- \
  meg-tokenize -q --train --vocab-size 1200 --eos-id 5000 -o bad.model train.jsonl
expect_fail 1 "normalization-rule-name" -- \
  meg-tokenize -q --train --normalization-rule-name nfc -o bad.model train.jsonl
no_file bad.model
echo "meg-tokenize --train: OK"
