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

# A document length far beyond the input (0xFFFFFFF0 tokens in a 46-byte file) is found short
# before anything is allocated: from a file and from a pipe, under a 1 GB memory limit.
python3 -c "import struct;h=open('docs.tok','rb').read(32);open('big.tok','wb').write(h+struct.pack('<I',0xFFFFFFF0)+b'\x01\x00'*5)"
expect_fail 1 "big.tok: offset 32: token stream ends inside a document" -- small_memory meg-index -o out big.tok
expect_fail 1 "<stdin>: offset 32: token stream ends inside a document" -- small_memory sh -c 'meg-index -o out < big.tok'
expect_fail 1 "<stdin>: offset 32: token stream ends inside a document" -- small_memory sh -c 'cat big.tok | meg-index -o out'
expect_fail 1 "big.tok: offset 32: token stream ends inside a document" -- \
  small_memory meg-tokenize $SPM --decode big.tok
expect_fail 1 "<stdin>: offset 32: token stream ends inside a document" -- \
  small_memory sh -c "cat big.tok | meg-tokenize $SPM --decode"
no_file out.bin out.idx
# --entropy over 31-bit token ids counts them without an array of 2^31 entries.
python3 - <<'PY'
import struct
doc = [0x7fffffff, 5, 0x7fffffff, 5]
open('wide.tok', 'wb').write(b'MEGTOKS\0' + struct.pack('<IIiB3xQ', 1, 0xffffffff, -1, 4, 0) +
                             struct.pack('<I%dI' % len(doc), len(doc), *doc) + struct.pack('<IQQ', 0xffffffff, 1, len(doc)))
PY
meg-index -q -o wide wide.tok
small_memory meg-index --info --entropy wide | grep -q "entropy     0.693 nats" || fail "entropy of 31-bit ids"

# Truncated and corrupt datasets.
cp docs.bin t.bin; head -c 5000 docs.idx > t.idx
expect_fail 1 "t.idx: size is 5000 bytes .* \(truncated\)" -- meg-index --info t
cp docs.idx u.idx; head -c 1000 docs.bin > u.bin
expect_fail 1 "u.bin: size is 1000 bytes .*truncated .bin" -- meg-index --verify u
cp docs.bin m.bin; { printf 'XXIDIDX\0\0'; tail -c +10 docs.idx; } > m.idx
expect_fail 1 "m.idx: offset 0: not a Megatron indexed dataset index" -- meg-index --info m
cp docs.bin v.bin; { head -c 9 docs.idx; printf '\x02'; tail -c +11 docs.idx; } > v.idx
expect_fail 1 "v.idx: offset 9: index version 2 is not supported" -- meg-index --info v
# Corrupt index entries are refused on opening, by every reader, with one line naming the .idx
# entry: a flipped length byte, a document index past the sequence count (it used to SIGBUS
# --info), sequence 0's length set to 0x7fffffff or to its length + 50 (offset 34).
read -r S L0 < <(corrupt_idx docs.idx f:40:B:7 past:34+12*S+8*7:q:S+3 huge:34:i:0x7fffffff long:34:i:L0+50 \
  neg:34:i:-4 back:34+12*S+8*9:q:2 ptr:34+4*S+8*5:q:12 random:40)
for mode in --info --verify "--info --entropy"; do
  expect_fail 1 "f.idx: offset 38: sequence 1: length [0-9]+ runs to byte [0-9]+, past the end of f.bin" -- meg-index $mode f
  expect_fail 1 "past.idx: offset $((34 + 12 * S + 56)): document index 7 is $((S + 3)), past the sequence count $S" -- \
    meg-index $mode past
  expect_fail 1 "huge.idx: offset 34: sequence 0: length 2147483647 runs to byte" -- meg-index $mode huge
  expect_fail 1 "long.idx: offset $((34 + 4 * S + 8)): sequence 1 starts at byte $((2 * L0)) but sequence 0 ends at byte $((2 * L0 + 100))" -- \
    meg-index $mode long
done
expect_fail 1 "neg.idx: offset 34: sequence 0: negative length -4" -- meg-index --info neg
expect_fail 1 "back.idx: offset $((34 + 12 * S + 72)): document index 9 is 2, below the one before it" -- meg-index --info back
expect_fail 1 "ptr.idx: offset $((34 + 4 * S + 40)): sequence 5 starts at byte 12" -- meg-index --info ptr
# Random bytes over the length table: always one line and exit 1, never a crash or exit 2.
for k in $(seq 1 40); do expect_fail 1 "r$k.idx: " -- meg-index --info r$k; done
# --merge refuses them rather than writing a dataset its own --verify rejects.
for bad in f past huge long; do
  expect_fail 1 "$bad.idx: offset" -- meg-index --merge -o merged docs $bad
done
no_file merged.bin merged.idx
# Overwriting a dataset replaces the pair as a pair: killed at random moments, the final names
# hold the whole old pair (docs), the whole new one, or no .idx; never a .bin beside an .idx
# that does not describe it. The next run removes the temporaries the killed ones left.
for _ in $(seq 30); do cat docs.tok; done > many.tok
meg-index -q -o new many.tok
took=$(run_seconds meg-index -q -o out many.tok)
for trial in $(seq "$(crash_trials)"); do
  cp docs.bin out.bin; cp docs.idx out.idx
  kill_at_random_moment "$took" meg-index -q -o out many.tok
  [ ! -e out.idx ] || { cmp -s out.idx docs.idx && cmp -s out.bin docs.bin; } ||
    { cmp -s out.idx new.idx && cmp -s out.bin new.bin; } || fail "crash trial $trial: out.bin and out.idx are not one pair"
done
meg-index -q -o out many.tok
same_file out.bin new.bin
same_file out.idx new.idx
no_file
expect_fail 1 "x.idx: cannot open" -- meg-index --info x
expect_fail 1 "token 1[0-9]+ is outside the vocabulary of 100" -- meg-index --verify --vocab-size 100 docs
expect_fail 1 "-o PREFIX is required" -- meg-index docs.tok
expect_fail 1 "^meg-index: --vocab-size: -1 is negative" -- meg-index --verify --vocab-size -1 docs
expect_fail 1 "^meg-index: --vocab-size: 0 is below the least allowed, 1" -- meg-index --verify --vocab-size 0 docs
expect_fail 1 "^meg-index: --vocab-size: 4294967296 is above the most allowed" -- meg-index --verify --vocab-size 4294967296 docs
echo "meg-index: ok"
