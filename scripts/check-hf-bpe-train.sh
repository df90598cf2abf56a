#!/usr/bin/env bash
# meg's trained byte-level BPE in Hugging Face's tokenizers: meg-tokenize --train --train-format hf
# (with user and control symbols, for each pre-tokenizer) on the demo corpus where Debian's
# fortunes are installed, else on the test fixtures; then tokenizers.Tokenizer.from_file must load
# the file, give meg-tokenize's ids for every document and every line, decode each back to its
# text, and transformers' PreTrainedTokenizerFast on the file must give the same ids. Needs python3
# with tokenizers and transformers.
#   bash scripts/check-hf-bpe-train.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/check-hf-lib.sh"
check_hf_setup check-hf-bpe-train "${1:-}" cpu meg-tokenize
python3 -c "import tokenizers" 2>/dev/null || { echo "check-hf-bpe-train: python3 lacks tokenizers" >&2; exit 1; }
tools=$here/../tests/tools

# Documents: the corpus, the parity texts (every branch of the regexes), chat markers, code.
corpus=()
if [ -d /usr/share/games/fortunes ]; then
  bash "$here/demo-corpus.sh" demo
  corpus=(demo/tech.jsonl demo/general.jsonl)
fi
cat "${corpus[@]}" "$data/megatron/fortunes_fixture.jsonl" "$data/hf-tokenizers/texts.jsonl" | python3 -c "
import json, sys
extra = ['<|im_start|>user\nHi  there<|im_end|>\n<|im_start|>assistant\n\tHello!<|im_end|><mask>',
         'def f(x):\n    return [x,  x]\r\n\treturn None\n\n\n', ' ', '\n\n', '\x01\x7f 1234567']
docs = [json.loads(l)['text'] for l in sys.stdin] + extra * 5
for d in docs:
    if d: print(json.dumps({'text': d}))" > docs.jsonl
# Lines, as meg's --format text reads them: ended by \n or \r\n, none empty.
python3 -c "
import json, sys
for l in open('docs.jsonl', encoding='utf-8'):
    for line in json.loads(l)['text'].removesuffix('\r').replace('\r\n', '\n').split('\n'):
        if line: sys.stdout.write(line + '\n')" > lines.txt

status=0
for pre in llama3 gpt2; do
  "$bin/meg-tokenize" -q --train --train-format hf --pre-tokenizer "$pre" --vocab-size 4000 \
    --user-symbols '<|im_start|>,<|im_end|>' --control-symbols '<mask>' -o "$pre.json" docs.jsonl
  "$bin/meg-tokenize" -q --tokenizer "$pre.json" -o "$pre-docs.tok" docs.jsonl
  "$bin/meg-tokenize" -q --tokenizer "$pre.json" --format text -o "$pre-lines.tok" lines.txt
  python3 - "$pre" "$tools" <<'PY' || status=1
import json, sys
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast
pre, tools = sys.argv[1], sys.argv[2]
sys.path.insert(0, tools)
from spm_corrupt import meg_tokens  # noqa: E402
tok = Tokenizer.from_file(f"{pre}.json")
fast = PreTrainedTokenizerFast(tokenizer_file=f"{pre}.json")
docs = [json.loads(l)["text"] for l in open("docs.jsonl", encoding="utf-8")]
lines = open("lines.txt", encoding="utf-8", newline="").read().split("\n")[:-1]
bad = 0
def problem(what):
    global bad
    bad += 1
    if bad <= 5: print(f"  {pre}: {what}")
if tok.get_vocab_size(with_added_tokens=True) != 4000:
    problem(f"vocabulary of {tok.get_vocab_size(with_added_tokens=True)}, asked 4000")
for kind, texts, ids in (("document", docs, meg_tokens(f"{pre}-docs.tok")), ("line", lines, meg_tokens(f"{pre}-lines.tok"))):
    if len(texts) != len(ids):
        problem(f"{len(texts)} {kind}s, meg encoded {len(ids)}")
        continue
    for i, (text, meg) in enumerate(zip(texts, ids)):
        hf = tok.encode(text).ids
        if hf != meg: problem(f"{kind} {i} {text[:60]!r}: tokenizers {hf[:12]} meg {meg[:12]}")
        if tok.decode(hf, skip_special_tokens=False) != text: problem(f"{kind} {i} {text[:60]!r} does not decode to itself")
        if fast.encode(text) != hf: problem(f"{kind} {i} {text[:60]!r}: PreTrainedTokenizerFast {fast.encode(text)[:12]}")
print(f"{pre}: {len(docs)} documents, {len(lines)} lines: {'all' if bad == 0 else bad} "
      f"{'agree with meg and decode to themselves' if bad == 0 else 'problems'}")
sys.exit(1 if bad else 0)
PY
done
exit $status
