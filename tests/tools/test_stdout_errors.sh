# Output on stdout that cannot be written (a full disk: /dev/full) is one line and exit 1 for every
# tool that writes stdout, never lost under exit 0; a reader that goes away (a closed pipe) ends
# the tool quietly, as SIGPIPE does.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
CK=$MEG_TEST_DATA/checkpoints
if [ ! -w /dev/full ]; then
  echo "stdout errors: skipped, no /dev/full here"
  exit 77
fi
cp $M/fortunes_spm.model .  # the checkpoints record the tokenizer by this relative name

# to_full COMMAND...: COMMAND with its stdout on a full disk; to_closed: with stdout closed.
to_full() { "$@" > /dev/full; }
to_closed() { "$@" >&-; }
FULL="^meg-[a-z-]+: <stdout>: write failed: No space left on device$"

meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
meg-tokenize -q --tokenizer fortunes_spm.model -o docs.tok $M/fortunes_fixture.jsonl
printf '{"text": "a b c"}\n{"text": "d e f"}\n' > task.jsonl

expect_fail 1 "$FULL" -- to_full meg-blend --dump run.blend
expect_fail 1 "$FULL" -- to_full meg-blend --dump run.blend --json
expect_fail 1 "$FULL" -- to_full meg-index --info $M/fortunes_spm
expect_fail 1 "$FULL" -- to_full meg-index --info --json $M/fortunes_spm $M/fortunes_gpt2
expect_fail 1 "$FULL" -- to_full meg-tokenize -q --tokenizer fortunes_spm.model $M/fortunes_fixture.jsonl
expect_fail 1 "$FULL" -- to_full meg-tokenize -q --tokenizer fortunes_spm.model --decode docs.tok
expect_fail 1 "$FULL" -- to_full meg-eval -q --load $CK/gpt --task task.jsonl --task-type lambada
expect_fail 1 "$FULL" -- to_full meg-eval -q --load $CK/gpt --task task.jsonl --task-type lambada --json
expect_fail 1 "$FULL" -- to_full meg-eval -q --load $CK/gpt --task task.jsonl --task-type lambada --per-example -
expect_fail 1 "$FULL" -- to_full meg-generate -q --load $CK/gpt --prompt "The cat" --max-tokens 4
printf '{"prompt": "The cat", "max_tokens": 4}\n' > prompts.jsonl
expect_fail 1 "$FULL" -- to_full meg-generate -q --load $CK/gpt --prompts prompts.jsonl
expect_fail 1 "$FULL" -- to_full meg-index --help
expect_fail 1 "$FULL" -- to_full meg-blend --version

# A tool that writes nothing on stdout does not fail for a full or closed stdout.
to_full meg-index -q --verify $M/fortunes_spm || fail "--verify should not need stdout"
to_closed meg-index -q --verify $M/fortunes_spm || fail "--verify should not need stdout"
# One that writes with stdout closed has lost its output.
expect_fail 1 "^meg-index: <stdout>: write failed: Bad file descriptor$" -- to_closed meg-index --info $M/fortunes_spm

# A closed pipe is quiet: killed by SIGPIPE (status 141), or with SIGPIPE ignored (as some
# launchers do) the same, not an error line.
for ignore in "" "trap '' PIPE;"; do
  bash -c "$ignore meg-tokenize -q --tokenizer fortunes_spm.model --decode docs.tok 2>err | head -c 10 >/dev/null;
           exit \${PIPESTATUS[0]}" && status=0 || status=$?
  [ "$status" -eq 141 ] || fail "${ignore:-default SIGPIPE}: a closed pipe gave status $status, not 141"
  [ ! -s err ] || fail "${ignore:-default SIGPIPE}: a closed pipe printed: $(cat err)"
done
meg-blend --dump run.blend 2>err | head -1 > first
[ ! -s err ] || fail "--dump | head -1 printed: $(cat err)"
grep -q "run.blend" first || fail "--dump | head -1 lost the first line"
