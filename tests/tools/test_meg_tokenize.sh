# meg-tokenize: formats, worker order, decode, training, and every kind of bad input.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
SPM="--tokenizer $M/fortunes_spm.model"

# --- Output order equals input order whatever --workers is (small batches force many of them).
meg-tokenize -q $SPM --workers 1 -o one.tok $M/fortunes_fixture.jsonl
meg-tokenize -q $SPM --workers 4 -o four.tok $M/fortunes_fixture.jsonl
same_file one.tok four.tok

# --- Decode gives back the documents (JSONL by default: lossless).
meg-tokenize -q $SPM --decode one.tok > decoded.jsonl
[ "$(wc -l < decoded.jsonl)" -eq 605 ] || fail "decode should give 605 documents"
meg-tokenize -q $SPM --decode --format text one.tok -o decoded.txt
grep -q "Protozoa are small" decoded.txt || fail "decoded text lacks a known fortune"
meg-tokenize -q $SPM --append-eod < decoded.jsonl > again.tok
meg-tokenize -q $SPM --append-eod $M/fortunes_fixture.jsonl > ref.tok
meg-index -q -o a again.tok && meg-index -q -o b ref.tok
same_file a.bin b.bin

# --- Plain text: one document per line, or blank-line separated.
printf 'first line\nsecond line\n' > lines.txt
meg-tokenize -q $SPM --format text lines.txt | meg-index -q -o lines
meg-index --info --json lines | grep -q '"documents":2' || fail "two lines should be two documents"
printf 'para one\nstill one\n\n\n\npara two\r\n\r\npara three' > paras.txt
meg-tokenize -q $SPM --format text --doc-separator '' paras.txt | meg-index -q -o paras
meg-index --info --json paras | grep -q '"documents":3' || fail "three paragraphs should be three documents"

# --- Other key, concatenated streams, zstd input.
printf '{"body": "hello world", "text": 3}\n' > body.jsonl
meg-tokenize -q $SPM --json-key body body.jsonl > body.tok
cat body.tok body.tok | meg-index -q -o twice
meg-index --info --json twice | grep -q '"documents":2' || fail "concatenated streams"
meg-tokenize -q $SPM --decode --zstd --zstd-level 19 one.tok -o decoded.jsonl.zst   # compressed JSONL, from meg itself
meg-tokenize -q $SPM --workers 4 decoded.jsonl.zst -o fromzst.tok
meg-tokenize -q $SPM --workers 4 decoded.jsonl -o fromplain.tok
same_file fromzst.tok fromplain.tok

# --- Training a SentencePiece model, then using it.
meg-tokenize -q --train --vocab-size 500 --model-type unigram -o tiny.model $M/fortunes_fixture.jsonl
meg-tokenize -q --tokenizer tiny.model --append-eod $M/fortunes_fixture.jsonl | meg-index -q -o tiny
meg-index --verify --vocab-size 500 tiny 2>/dev/null
expect_fail 1 "needs -o" -- meg-tokenize --train --vocab-size 500 $M/fortunes_fixture.jsonl
# Negative counts are refused, not read as 2^64 - 1 (all lines) or passed on to the trainer.
expect_fail 1 "^meg-tokenize: --max-sentences: -1 is negative" -- meg-tokenize --train --max-sentences -1 -o m.model $M/fortunes_fixture.jsonl
expect_fail 1 "^meg-tokenize: --vocab-size: -5 is negative" -- meg-tokenize --train --vocab-size -5 -o m.model $M/fortunes_fixture.jsonl
no_file m.model

# --- Bad input: one line naming file and line, exit 1, nothing left under the output name.
printf '{"text": "fine"}\n{"text": "broken\n' > malformed.jsonl
expect_fail 1 "^meg-tokenize: --workers 100000: too many threads; at most [0-9]+ here" -- \
  meg-tokenize $SPM --workers 100000 $M/fortunes_fixture.jsonl -o out.tok
no_file out.tok
expect_fail 1 "^meg-tokenize: malformed.jsonl:2:17: not valid JSON: syntax error" -- meg-tokenize $SPM malformed.jsonl -o out.tok
no_file out.tok
printf '{"text": "fine"}\n{"txt": "x"}\n' > nokey.jsonl
expect_fail 1 'nokey.jsonl:2: no "text" key' -- meg-tokenize $SPM nokey.jsonl -o out.tok
printf '{"text": ["a"]}\n' > notstring.jsonl
expect_fail 1 'notstring.jsonl:1: "text" is a array, not a string' -- meg-tokenize $SPM notstring.jsonl -o out.tok
printf '{"text": "ok"}\n{"text": "caf\xe9"}\n' > latin1.jsonl
expect_fail 1 "latin1.jsonl:2: invalid UTF-8 at column 14 \(byte 0xe9\)" -- meg-tokenize $SPM latin1.jsonl -o out.tok
printf '{"text": ""}\n' > empty.jsonl
expect_fail 1 "empty.jsonl:1: empty document" -- meg-tokenize $SPM empty.jsonl -o out.tok
printf '[1, 2]\n' > array.jsonl
expect_fail 1 "array.jsonl:1: expected a JSON object" -- meg-tokenize $SPM array.jsonl -o out.tok
printf 'ok\n\xff\xfe\n' > bad.txt
expect_fail 1 "bad.txt:2: invalid UTF-8" -- meg-tokenize $SPM --format text bad.txt -o out.tok
no_file out.tok

# A bad line deep in a large input, with many workers: still reported by its line number.
{ head -n 600 $M/fortunes_fixture.jsonl; echo '{"text": 5}'; cat $M/fortunes_fixture.jsonl; } > late.jsonl
expect_fail 1 'late.jsonl:601: "text" is a number' -- meg-tokenize $SPM --workers 3 late.jsonl -o out.tok
no_file out.tok

# --skip-bad skips and counts.
cat malformed.jsonl nokey.jsonl empty.jsonl > mixed.jsonl
meg-tokenize $SPM --skip-bad mixed.jsonl -o skipped.tok 2> skip.log
grep -q "skipped 2 bad and 1 empty" skip.log || fail "skip summary: $(cat skip.log)"
meg-index -q -o skipped skipped.tok
meg-index --info --json skipped | grep -q '"documents":2' || fail "two good documents remain"

# Wrong options and missing files.
expect_fail 1 "no tokenizer" -- meg-tokenize -o out.tok $M/fortunes_fixture.jsonl
expect_fail 1 "missing.model: cannot open" -- meg-tokenize --tokenizer missing.model $M/fortunes_fixture.jsonl
expect_fail 1 "not a SentencePiece model" -- meg-tokenize --tokenizer $M/fortunes_fixture.jsonl -o out.tok lines.txt
expect_fail 1 "nope.jsonl: cannot open" -- meg-tokenize $SPM nope.jsonl -o out.tok
expect_fail 1 "--workers" -- meg-tokenize $SPM --workers many lines.txt
expect_fail 1 "--format" -- meg-tokenize $SPM --format xml lines.txt
expect_fail 1 "vocab.json: a GPT-2 vocabulary needs its merges" -- meg-tokenize --tokenizer vocab.json lines.txt
no_file out.tok
echo "meg-tokenize: ok"

# Settings files: the same keys as the long options; the command line wins; mistakes are named.
printf '{"tokenizer": "%s", "append-eod": true, "workers": 3}\n' "$M/fortunes_spm.model" > settings.json
meg-tokenize -q --config settings.json $M/fortunes_fixture.jsonl | meg-index -q -o fromsettings
same_file fromsettings.bin $M/fortunes_spm.bin
printf '{"tokenizer": \n' > broken.json
expect_fail 1 "^meg-tokenize: broken.json:2:1: not valid JSON: syntax error" -- meg-tokenize --config broken.json lines.txt
printf '{"workerz": 2}\n' > typo.json
expect_fail 1 "typo.json: unknown setting 'workerz'" -- meg-tokenize --config typo.json lines.txt
echo "meg-tokenize settings: ok"
