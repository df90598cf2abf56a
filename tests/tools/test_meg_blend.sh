# meg-blend: a blend of the reference Megatron datasets, --dump in both forms, and bad input refused
# with one line, exit status 1 and no output file.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
BUILD="meg-blend -q --seq-length 64 --samples 1000"

$BUILD -o run.blend 0.3 $M/fortunes_spm 0.7 $M/fortunes_gpt2
$BUILD -o again.blend 0.3 $M/fortunes_spm 0.7 $M/fortunes_gpt2
same_file run.blend again.blend
$BUILD --seed 99 -o other.blend 0.3 $M/fortunes_spm 0.7 $M/fortunes_gpt2
cmp -s run.blend other.blend && fail "a different seed gave the same blend"

# --dump: the composition, with the realized shares of the weights.
meg-blend --dump run.blend > dump.txt
grep -q "^samples      train 1000, valid 22, test 0$" dump.txt || fail "dump sample counts: $(cat dump.txt)"
grep -q "^input 2      $M/fortunes_gpt2$" dump.txt || fail "dump input table"
grep -Eq "^  train +586 +26964 +2 +704 +842 +700 +0.7000$" dump.txt || fail "dump gpt2 train row: $(cat dump.txt)"
meg-blend --dump run.blend --json > dump.json
grep -q '"seq_length": 64' dump.json || fail "json seq_length"
grep -q '"samples_drawn": 300' dump.json || fail "json drawn samples"
grep -q '"separate_final_epoch": true' dump.json || fail "json final epoch"

# Explicit valid/test sizes and a different split.
$BUILD --valid-samples 40 --test-samples 5 --split 90,8,2 -o sized.blend 1 $M/fortunes_spm
meg-blend --dump sized.blend | grep -q "^samples      train 1000, valid 40, test 5$" || fail "sized blend"

# A split that an input's documents cannot fill leaves the blend without it (by default its size is
# one epoch of the split over all inputs): a warning names each input to blame and the split. A
# small input's 1 in 1000 test documents round to none; fortunes_spm's one test document is shorter
# than a sample. Splits asked to be empty (weight 0, or 0 samples) are not warned about.
head -n 100 $M/fortunes_fixture.jsonl | meg-tokenize -q --tokenizer $M/fortunes_spm.model - | meg-index -q -o small
exits_with 0 $BUILD -o warned.blend 1 small 1 $M/fortunes_spm
[ "$(grep -c . .err)" -eq 2 ] || fail "expected two warnings: $(cat .err)"
stderr_matches "^meg-blend: warning: small: its test split \(--split 969,30,1\) holds 0 of its 100 documents and 0 tokens, less than one sample of --seq-length 64 \+ 1: the blend has no test samples$"
stderr_matches "^meg-blend: warning: $M/fortunes_spm: its test split \(--split 969,30,1\) holds 1 of its 605 documents and [0-9]+ tokens, less than one sample of --seq-length 64 \+ 1: the blend has no test samples$"
meg-blend --dump warned.blend | grep -q "^samples      train 1000, valid [1-9][0-9]*, test 0$" || fail "warned blend: $(meg-blend --dump warned.blend)"
for quiet in "--test-samples 0" "--split 97,3,0"; do
  exits_with 0 $BUILD $quiet -o quiet.blend 1 small 1 $M/fortunes_spm
  [ ! -s .err ] || fail "$quiet warned: $(cat .err)"
done

# Bad weights and arguments.
expect_fail 1 "weight 'abc' of .*fortunes_spm is not a number" -- $BUILD -o bad.blend abc $M/fortunes_spm
expect_fail 1 "weights sum to 0" -- $BUILD -o bad.blend 0 $M/fortunes_spm 0 $M/fortunes_gpt2
expect_fail 1 "odd number" -- $BUILD -o bad.blend 1 $M/fortunes_spm 2
expect_fail 1 "--split '1,x': expected up to three" -- $BUILD --split 1,x -o bad.blend 1 $M/fortunes_spm
expect_fail 1 "--samples is required" -- meg-blend --seq-length 64 -o bad.blend 1 $M/fortunes_spm
expect_fail 1 "gives the test split no documents" -- $BUILD --split 1,1,0 --test-samples 3 -o bad.blend 1 $M/fortunes_spm
no_file bad.blend

# Absurd sizes, refused with one line naming the option before anything is allocated: more
# samples than memory holds (bad_alloc before), a negative count (an empty blend before), a
# sequence longer than a split (a 142 MB blend before).
expect_fail 1 "^meg-blend: --samples 100000000000: the blend's indices would take .* more than the .* this process may use$" -- \
  meg-blend -q --seq-length 64 --samples 100000000000 -o bad.blend 1 $M/fortunes_spm
# ulimit -v counts too (AddressSanitizer's shadow memory leaves no room for one).
sanitized || expect_fail 1 "^meg-blend: --samples 30000000: the blend's indices would take 1.16 GB of memory, more than the" -- \
  small_memory meg-blend -q --seq-length 64 --samples 30000000 -o bad.blend 1 $M/fortunes_spm
for option in --samples --valid-samples --test-samples --seq-length; do
  expect_fail 1 "^meg-blend: $option: -5 is negative" -- $BUILD $option -5 -o bad.blend 1 $M/fortunes_spm
done
expect_fail 1 "^meg-blend: --samples: '1e3' is not a whole number" -- $BUILD --samples 1e3 -o bad.blend 1 $M/fortunes_spm
expect_fail 1 "fortunes_spm: the train split has 586 documents and 32961 tokens, fewer than one sample of --seq-length 4000000000 \+ 1" -- \
  meg-blend -q --seq-length 4000000000 --samples 1000 -o bad.blend 1 $M/fortunes_spm
expect_fail 1 "^meg-blend: --samples 1000000000000000000: that many samples of --seq-length 64 tokens" -- \
  meg-blend -q --seq-length 64 --samples 1000000000000000000 -o bad.blend 1 $M/fortunes_spm
no_file bad.blend

# Missing, truncated and corrupt datasets.
expect_fail 1 "nothere.idx: cannot open" -- $BUILD -o bad.blend 1 $M/fortunes_spm 1 nothere
cp $M/fortunes_spm.bin t.bin; head -c 5000 $M/fortunes_spm.idx > t.idx
expect_fail 1 "t.idx: size is 5000 bytes .* \(truncated\)" -- $BUILD -o bad.blend 1 t
cp $M/fortunes_spm.bin m.bin; { printf 'XXIDIDX\0\0'; tail -c +10 $M/fortunes_spm.idx; } > m.idx
expect_fail 1 "m.idx: offset 0: not a Megatron indexed dataset index" -- $BUILD -o bad.blend 1 m
no_file bad.blend

# Corrupt index entries (the issue's: sequence 0's length, offset 34, set to 0x7fffffff or to
# its length + 50; random length bytes) are refused on opening: one line, exit 1, no blend.
read -r S L0 < <(corrupt_idx $M/fortunes_spm.idx huge:34:i:0x7fffffff long:34:i:L0+50 random:20)
expect_fail 1 "huge.idx: offset 34: sequence 0: length 2147483647 runs to byte" -- $BUILD -o bad.blend 1 huge
expect_fail 1 "long.idx: offset [0-9]+: sequence 1 starts at byte $((2 * L0)) but sequence 0 ends at byte $((2 * L0 + 100))" -- \
  $BUILD -o bad.blend 1 long
for k in $(seq 1 20); do expect_fail 1 "r$k.idx: " -- $BUILD -o bad.blend 1 r$k; done
no_file bad.blend

# A failed build leaves an existing blend as it was.
cp run.blend keep.blend
expect_fail 1 "nothere.idx: cannot open" -- $BUILD -o run.blend 1 nothere
same_file run.blend keep.blend

# Overwriting a blend killed at random moments leaves the whole old blend or the whole new one,
# and the next run removes the temporaries the killed ones left.
NEW="meg-blend -q --seq-length 64 --samples 200000 --seed 7 -o crash.blend 0.3 $M/fortunes_spm 0.7 $M/fortunes_gpt2"
$NEW
cp crash.blend new.blend
took=$(run_seconds $NEW)
for trial in $(seq "$(crash_trials)"); do
  cp run.blend crash.blend
  kill_at_random_moment "$took" $NEW
  cmp -s crash.blend run.blend || cmp -s crash.blend new.blend || fail "crash trial $trial: crash.blend is neither blend"
done
$NEW
same_file crash.blend new.blend
no_file

# Truncated and corrupt blend files.
head -c 1000 run.blend > cut.blend
expect_fail 1 "cut.blend: size is 1000 bytes but its header says [0-9]+ \(truncated\)" -- meg-blend --dump cut.blend
cp run.blend flip.blend
printf '\xff' | dd of=flip.blend bs=1 seek=5000 conv=notrunc status=none
expect_fail 1 "flip.blend: checksum mismatch" -- meg-blend --dump flip.blend
expect_fail 1 "fortunes_spm.idx: offset 0: not a meg blend file" -- meg-blend --dump $M/fortunes_spm.idx
expect_fail 1 "--dump takes only the blend file" -- meg-blend --dump run.blend 1 $M/fortunes_spm
echo "meg-blend: ok"
