# SentencePiece models that are corrupt: meg-tokenize refuses each in one line or tokenizes exactly as
# the library's own spm_encode does with it; training failures are one line too.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
M=$MEG_TEST_DATA/megatron

# --- Training failures: the library's text in one line naming the model, and no model left.
printf 'hello world\nfoo bar\n' > tiny.txt
expect_fail 1 "^meg-tokenize: tiny.model: training failed: Vocabulary size too high \(5000\)\. Please set it to a value <= [0-9]+\.$" -- \
  meg-tokenize -q --train --format text --vocab-size 5000 -o tiny.model tiny.txt
no_file tiny.model
exits_with 1 meg-tokenize --train --format text --vocab-size 5000 -o tiny.model tiny.txt
[ "$(grep -c . "$WORK/.err")" -eq 2 ] || fail "training should log one line and fail in one: $(cat "$WORK/.err")"
expect_fail 1 "^meg-tokenize: tiny.model: training failed: check failed: .*character_coverage" -- \
  meg-tokenize -q --train --format text --vocab-size 30 --character-coverage 2 -o tiny.model tiny.txt
expect_fail 1 "^meg-tokenize: --vocab-size: 0 is below the least allowed, 1" -- \
  meg-tokenize -q --train --format text --vocab-size 0 -o tiny.model tiny.txt
no_file tiny.model

# The reference, and the trainer of models meg's cannot make: Debian's sentencepiece package.
if ! command -v spm_encode >/dev/null || ! command -v spm_train >/dev/null; then
  echo "corrupt models: skipped, no spm_encode/spm_train (Debian package sentencepiece) to compare with"
  exit 77
fi

# --- A model the library fails on for some text (a word model meeting a control piece's text as a
# word) is bad input too.
python3 -c "import json,sys; [print(json.loads(l)['text']) for l in open(sys.argv[1])]" \
  $M/fortunes_fixture.jsonl > fortunes.txt
spm_train --input=fortunes.txt --model_prefix=word --vocab_size=800 --model_type=word \
  --add_dummy_prefix=false --minloglevel=2 >/dev/null 2>&1
printf '<s>\n' > control.txt
expect_fail 1 "^meg-tokenize: word.model: the model cannot encode a text: " -- \
  meg-tokenize -q --tokenizer word.model --format text -o control.tok control.txt
no_file control.tok

# --- Corrupt models against the reference: a BPE model of meg's training, a unigram model with byte
# fallback, and a word model, a few hundred variants each.
# (nmt_nfkc: a model with a normalization table to corrupt; meg trains with none by default)
meg-tokenize -q --train --vocab-size 400 --normalization-rule-name nmt_nfkc -o bpe.model $M/fortunes_fixture.jsonl
spm_train --input=fortunes.txt --model_prefix=unigram --vocab_size=600 --model_type=unigram \
  --byte_fallback=true --minloglevel=2 >/dev/null 2>&1
cat > text.txt <<'EOF'
The quick brown fox jumps over the lazy dog.
  Leading and   repeated	spaces, tabs	and trailing  
Ünïcödé façade naïve café Ångström
ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ and ﬁ ligatures ½ ①
日本語のテキストと中文文本
emoji 😀 and symbols ™ © ∑ ≠
UPPER lower MiXeD 12345 3.14159
EOF
head -40 fortunes.txt | grep . >> text.txt
python3 "$HERE/spm_corrupt.py" text.txt 220 bpe.model unigram.model word.model ||
  fail "corrupt SentencePiece models (above)"
