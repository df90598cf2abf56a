# meg-index: --info, --verify, --merge, and truncated or corrupt inputs refused cleanly.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
SPM="--tokenizer $M/fortunes_spm.model"

meg-tokenize -q $SPM --append-eod $M/fortunes_fixture.jsonl -o docs.tok
meg-index -q -o docs docs.tok

# --info in both forms.
meg-index --info docs | grep -q "documents   605" || fail "info text"
meg-index --info --json docs | grep -q '"tokens":33733' || fail "info json"

# --merge: two copies make one dataset with every document twice.
meg-index -q --merge -o both docs $M/fortunes_spm
meg-index --info --json both | grep -q '"documents":1210' || fail "merged document count"
meg-index --verify --vocab-size 2000 both 2>/dev/null
cat docs.tok docs.tok | meg-index -q -o both_from_streams
same_file both.bin both_from_streams.bin
same_file both.idx both_from_streams.idx
cp $M/fortunes_gpt2.bin gpt2.bin; cp $M/fortunes_gpt2.idx gpt2.idx
meg-index -q --merge -o mixed docs gpt2   # same dtype, different tokenizers: Megatron allows it too
expect_fail 1 "must not be one of the inputs" -- meg-index --merge -o docs docs

# Truncated and corrupt token streams.
head -c 1000 docs.tok > cut.tok
expect_fail 1 "cut.tok: offset [0-9]+: token stream ends inside a document \(truncated" -- meg-index -o out cut.tok
no_file out.bin out.idx
head -c 20 docs.tok > header.tok
expect_fail 1 "header.tok: offset 0: token stream ends inside the header" -- meg-index -o out header.tok
printf 'hello, world, this is not a token stream' > text.tok
expect_fail 1 "text.tok: offset 0: not a meg token stream" -- meg-index -o out text.tok
: > empty.tok
expect_fail 1 "empty.tok: empty input" -- meg-index -o out empty.tok
meg-tokenize -q $SPM --append-eod --zstd -o docs.tok.zst $M/fortunes_fixture.jsonl
head -c 3000 docs.tok.zst > cut.tok.zst
expect_fail 1 "cut.tok.zst: (truncated zstd stream|offset)" -- meg-index -o out cut.tok.zst
no_file out.bin out.idx

# Truncated and corrupt datasets.
cp docs.bin t.bin; head -c 5000 docs.idx > t.idx
expect_fail 1 "t.idx: size is 5000 bytes .* \(truncated\)" -- meg-index --info t
cp docs.idx u.idx; head -c 1000 docs.bin > u.bin
expect_fail 1 "u.bin: size is 1000 bytes .*truncated .bin" -- meg-index --verify u
cp docs.bin m.bin; { printf 'XXIDIDX\0\0'; tail -c +10 docs.idx; } > m.idx
expect_fail 1 "m.idx: offset 0: not a Megatron indexed dataset index" -- meg-index --info m
cp docs.bin v.bin; { head -c 9 docs.idx; printf '\x02'; tail -c +11 docs.idx; } > v.idx
expect_fail 1 "v.idx: offset 9: index version 2 is not supported" -- meg-index --info v
# A flipped length inside the index: the quick checks may pass, --verify must not.
cp docs.bin f.bin; cp docs.idx f.idx
printf '\x07' | dd of=f.idx bs=1 seek=40 conv=notrunc status=none
expect_fail 1 "f.idx: sequence [0-9]+: byte offset" -- meg-index --verify f
expect_fail 1 "x.idx: cannot open" -- meg-index --info x
expect_fail 1 "token 1[0-9]+ is outside the vocabulary of 100" -- meg-index --verify --vocab-size 100 docs
expect_fail 1 "-o PREFIX is required" -- meg-index docs.tok
echo "meg-index: ok"
