# meg-tokenize --train --train-format hf: a byte-level BPE tokenizer.json. meg reads it back, every
# document (and text never seen in training) decodes to itself, the vocabulary has the size asked,
# the added tokens their ids, --append-eod ends documents with <|endoftext|>, training twice (on
# any number of workers) writes the same bytes; bad options write nothing.
TOOLS=$(cd "$(dirname "$0")" && pwd)
source "$TOOLS/lib.sh"

python3 - "$MEG_TEST_DATA/megatron/fortunes_fixture.jsonl" "$MEG_TEST_DATA/hf-tokenizers/texts.jsonl" <<'PY'
import json, sys
docs = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
code = "def f(x):\n    if x:\n        return [x,  x]\n\treturn None\n\n\n# end  \n"
chat = "<|im_start|>user\nHello  there<|im_end|>\n<|im_start|>assistant\n\tHi!<|im_end|>"
train = docs + [code] * 20 + [chat] * 20
unseen = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
unseen = [t for t in unseen if t] + ["emoji \U0001F600 end", " ", "\n\n", "a\r\nb\r\n", "\x01\x7f <mask> 12345678"]
with open("train.jsonl", "w") as f:
    for d in train: f.write(json.dumps({"text": d}) + "\n")
with open("test.jsonl", "w") as f:
    for d in train + unseen: f.write(json.dumps({"text": d}) + "\n")
PY

# roundtrip TOKENIZER CORPUS: every document of CORPUS decodes to itself.
roundtrip() {
  meg-tokenize -q --tokenizer "$1" -o rt.tok "$2"
  meg-tokenize -q --tokenizer "$1" --decode -o rt.jsonl rt.tok
  python3 - "$2" rt.jsonl <<'PY' || fail "$1: round trip of $2"
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
bad = [(x, y) for x, y in zip(a, b) if x != y]
assert len(a) == len(b) and not bad, (len(a), len(b), bad[:2])
PY
}

meg-tokenize -q --train --train-format hf --vocab-size 1000 --user-symbols '<|im_start|>,<|im_end|>' \
  --control-symbols '<mask>' -o tok.json train.jsonl
roundtrip tok.json test.jsonl
meg-tokenize --tokenizer tok.json -o /dev/null test.jsonl 2> info.log
grep -q "byte-level BPE), vocab 1000 " info.log || fail "meg reads it as a byte-level BPE of 1000: $(cat info.log)"

# The file: HF's layout, ids 0.. without gaps, the added tokens first, user symbols not special.
python3 - tok.json <<'PY' || fail "tokenizer.json layout"
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
assert list(j) == ["version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                   "post_processor", "decoder", "model"], list(j)
added = [(t["id"], t["content"], t["special"]) for t in j["added_tokens"]]
assert added == [(0, "<|endoftext|>", True), (1, "<mask>", True), (2, "<|im_start|>", False), (3, "<|im_end|>", False)], added
vocab = j["model"]["vocab"]
assert sorted(vocab.values()) == list(range(1000)), len(vocab)
assert vocab["!"] == 4 and vocab["\u0120"] == 4 + 220 and vocab["<mask>"] == 1, (vocab["!"], vocab["\u0120"])
assert len(j["model"]["merges"]) >= 1000 - 256 - 4 and all(len(m) == 2 for m in j["model"]["merges"])
PY

# User symbols stay whole; --append-eod ends each document with <|endoftext|> (id 0).
printf '{"text": "x<|im_start|>y<|im_end|>z"}\n' > sym.jsonl
meg-tokenize -q --tokenizer tok.json --append-eod -o sym.tok sym.jsonl
python3 -c "
import sys; sys.path.insert(0, '$TOOLS')
from spm_corrupt import meg_tokens
ids = meg_tokens('sym.tok')[0]
assert ids[1] == 2 and ids[3] == 3 and ids[-1] == 0 and len(ids) == 6, ids
" || fail "user symbols and the end-of-document token"
meg-tokenize -q --tokenizer tok.json --append-eod train.jsonl | meg-index -q -o eod
meg-index --info --json eod | grep -q "\"documents\":$(wc -l < train.jsonl)" || fail "<|endoftext|> ends the documents"

# Deterministic, whatever the workers; the gpt2 pre-tokenizer; text input.
meg-tokenize -q --train --train-format hf --vocab-size 1000 --user-symbols '<|im_start|>,<|im_end|>' \
  --control-symbols '<mask>' -w 1 -o again.json train.jsonl
same_file tok.json again.json
meg-tokenize -q --train --train-format hf --vocab-size 600 --pre-tokenizer gpt2 -o gpt2.json train.jsonl
roundtrip gpt2.json test.jsonl
cmp -s tok.json gpt2.json && fail "the gpt2 pre-tokenizer made the llama3 file"
python3 -c "
import json
for l in open('train.jsonl'): print(json.loads(l)['text'].replace('\n', ' '))" > train.txt
meg-tokenize -q --train --train-format hf --vocab-size 400 --format text -o text.json train.txt
roundtrip text.json test.jsonl

# A text too small for the vocabulary asked: what it has, and a warning.
printf '{"text": "ab ab abc"}\n' > tiny.jsonl
meg-tokenize --train --train-format hf --vocab-size 1000 -o tiny.json tiny.jsonl 2> tiny.log
grep -q "ran out of pairs to merge: 260 tokens, not the 1000 asked" tiny.log || fail "tiny corpus: $(cat tiny.log)"
roundtrip tiny.json test.jsonl

# --- The demo corpus (Debian's fortunes), all of it.
if [ -d /usr/share/games/fortunes ]; then
  bash "$TOOLS/../../scripts/demo-corpus.sh" demo
  cat demo/tech.jsonl demo/general.jsonl > demo.jsonl
  meg-tokenize -q --train --train-format hf --vocab-size 8000 -o demo.json demo.jsonl
  roundtrip demo.json demo.jsonl
  echo "demo corpus: $(wc -l < demo.jsonl) documents decode to themselves"
else
  echo "demo corpus: skipped (no /usr/share/games/fortunes)"
fi

# --- Bad options: one line, nothing written.
expect_fail 1 "^meg-tokenize: --vocab-size 258: must be at least 259, for the 256 bytes and 3 added tokens" -- \
  meg-tokenize -q --train --train-format hf --vocab-size 258 --user-symbols 'a1,b2' -o bad.json train.jsonl
expect_fail 1 "^meg-tokenize: --model-type applies to --train-format spm only" -- \
  meg-tokenize -q --train --train-format hf --model-type unigram -o bad.json train.jsonl
expect_fail 1 "^meg-tokenize: --pre-tokenizer applies to --train-format hf only" -- \
  meg-tokenize -q --train --pre-tokenizer gpt2 -o bad.model train.jsonl
expect_fail 1 "^meg-tokenize: --train-format applies to --train only" -- \
  meg-tokenize -q --train-format hf --tokenizer tok.json -o bad.tok train.jsonl
expect_fail 1 "train-format" -- meg-tokenize -q --train --train-format bpe -o bad.json train.jsonl
expect_fail 1 "is an added token already" -- \
  meg-tokenize -q --train --train-format hf --control-symbols '<|endoftext|>' -o bad.json train.jsonl
expect_fail 1 "needs -o" -- meg-tokenize -q --train --train-format hf train.jsonl
: > empty.txt
expect_fail 1 "no text to train on|empty" -- meg-tokenize -q --train --train-format hf --format text -o bad.json empty.txt
no_file bad.json bad.model bad.tok
echo "meg-tokenize --train --train-format hf: OK"
