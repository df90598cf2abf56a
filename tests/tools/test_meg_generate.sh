# meg-generate: tiny models trained here on a few sentences (GPT-2 on a byte-level tokenizer, so
# that characters span several tokens; Llama on SentencePiece) continue each sentence from its
# first words, greedily, with --prompt, from stdin (streamed in turn, also with many slots and
# input that arrives slowly) and from JSONL (every field, per-line settings, results in input
# order); sampling with a seed repeats itself and does not depend on --batch; checkpoints resharded
# or trained under mpirun give the same answers; the model split over tensor-parallel ranks under
# mpirun gives one process's answers, from every kind of input; bad input is refused with one line.
source "$(dirname "$0")/lib.sh"
SPM=$MEG_TEST_DATA/megatron/fortunes_spm.model

# A GPT-2 tokenizer of the 256 byte tokens and <|endoftext|>, with no merges: every character of
# several bytes is several tokens.
python3 - <<'PY'
import json
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["<|endoftext|>"] = 256
json.dump(vocab, open("vocab.json", "w"), ensure_ascii=False)
open("merges.txt", "w").write("#version: 0.2\n")
PY

# Sentences whose first words tell which one follows; 300 documents of them in random order.
CAT="The cat sat on the mat and looked at the moon."
WISE="A wise man once said that time is money."
RED="Red apples grow on old trees in the garden."
EMOJI="Emoji 😀 and 日本語 façade split bytes."
python3 - "$CAT" "$WISE" "$RED" "$EMOJI" <<'PY'
import json, random, sys
random.seed(1)
with open("docs.jsonl", "w") as f:
    for _ in range(300):
        f.write(json.dumps({"text": random.choice(sys.argv[1:])}, ensure_ascii=False) + "\n")
PY
TRAIN="meg-pretrain -q --device cpu --micro-batch 8 --global-batch 8 --warmup-iters 5 --log-interval 50"
meg-tokenize -q -t vocab.json --merges merges.txt --append-eod docs.jsonl | meg-index -q -o bytes
meg-blend -q --seq-length 64 --samples 3200 -o bytes.blend 1 bytes
$TRAIN --model tiny --data bytes.blend --tokenizer vocab.json --merges merges.txt --lr 3e-3 --iters 400 --save gpt
meg-tokenize -q -t $SPM --append-eod docs.jsonl | meg-index -q -o spm
meg-blend -q --seq-length 32 --samples 1200 -o spm.blend 1 spm
LLAMA="$TRAIN --model tiny-llama --data spm.blend --tokenizer $SPM --lr 1e-2 --iters 150"
$LLAMA --save llama
GEN="meg-generate -q --device cpu"

# (1) Greedy: --prompt continues each sentence, both families (the end-of-document token ends it).
for model in gpt llama; do
  for s in "$CAT" "$WISE" "$RED"; do
    prompt=$(echo "$s" | cut -d' ' -f1-3)  # the first three words
    out=$($GEN --load $model --prompt "$prompt")
    [ "$out" = "${s#"$prompt"}" ] || fail "$model: '$prompt' gave '$out', expected '${s#"$prompt"}'"
  done
done
out=$($GEN --load gpt --prompt "Emoji 😀")
[ "$out" = " and 日本語 façade split bytes." ] || fail "gpt: 'Emoji 😀' gave '$out'"

# The checkpoint keeps its tokenizer (given to meg-pretrain as vocab.json and merges.txt, here), so
# it loads from any directory, and wherever the run directory goes. Older checkpoints name the
# tokenizer by its path only: one that records relative paths loads where they lead, and elsewhere
# is refused with the file and the way out.
mkdir -p elsewhere
[ "$(cd elsewhere && $GEN --load ../gpt --prompt "Emoji 😀")" = "$out" ] || fail "gpt loaded from another directory"
mv gpt elsewhere/gpt-moved
[ "$($GEN --load elsewhere/gpt-moved --prompt "Emoji 😀")" = "$out" ] || fail "gpt loaded after its directory moved"
mv elsewhere/gpt-moved gpt
cp -r gpt old
python3 - old/iter_*/checkpoint.json <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
j["record"]["options"].update(tokenizer="vocab.json", merges="merges.txt")
del j["record"]["tokenizer"]
for name in j.pop("attachments"):
    os.remove(os.path.join(os.path.dirname(sys.argv[1]), name))
json.dump(j, open(sys.argv[1], "w"))
PY
[ "$($GEN --load old --prompt "Emoji 😀")" = "$out" ] || fail "a checkpoint recording relative tokenizer paths"
expect_fail 1 "^meg-generate: .*old/iter_0000400: the tokenizer file it records, vocab.json, is not there .*--tokenizer$" -- \
  bash -c "cd elsewhere && exec $GEN --load ../old --prompt hi"

# (2) stdin: one answer per line, each streamed in turn; --echo; the same with 4 slots.
printf '%s\n' "The cat sat" "Emoji" "A wise man" > prompts.txt
$GEN --load gpt < prompts.txt > answers.txt
printf '%s\n' "${CAT#The cat sat}" "${EMOJI#Emoji}" "${WISE#A wise man}" > expected.txt
same_file expected.txt answers.txt
$GEN --load gpt --batch 4 < prompts.txt > answers4.txt
same_file expected.txt answers4.txt
$GEN --load gpt --echo < prompts.txt > echoed.txt
printf '%s\n' "$CAT" "$EMOJI" "$WISE" > expected_echo.txt
same_file expected_echo.txt echoed.txt
# Input that arrives slowly: the first answer comes out before the second line is written, with 4
# slots too (a free slot does not wait for input while another sequence runs).
mkfifo slow
$GEN --load gpt --batch 4 < slow > slow.txt &
pid=$!
exec 3>slow
echo "The cat sat" >&3
for _ in $(seq 100); do grep -q moon slow.txt && break; sleep 0.1; done
grep -q "moon" slow.txt || fail "the first answer did not come out before more input: $(cat slow.txt)"
echo "Red apples" >&3
exec 3>&-
wait $pid
printf '%s\n' "${CAT#The cat sat}" "${RED#Red apples}" > expected_slow.txt
same_file expected_slow.txt slow.txt

# (3) JSONL: results in input order with every field; per-line settings; --output written whole.
cat > prompts.jsonl <<'EOF'
{"prompt": "The cat sat"}
{"prompt": "A wise man", "max_tokens": 3}

{"prompt": "Red apples grow", "stop": " trees"}
{"prompt": "Emoji", "stop": ["bytes", "日本"]}
{"prompt": ""}
EOF
$GEN --load llama --prompts prompts.jsonl --batch 3 -o results.jsonl
python3 - "$CAT" "$RED" <<'PY' || fail "results.jsonl: $(cat results.jsonl)"
import json, sys
cat, red = sys.argv[1:]
rows = [json.loads(l) for l in open("results.jsonl")]
assert [r["id"] for r in rows] == [0, 1, 2, 3, 4], rows
for r in rows:
    assert list(r) == ["id", "prompt", "completion", "completion_ids", "finish_reason"], r
    assert all(isinstance(i, int) for i in r["completion_ids"]), r
assert rows[0]["prompt"] == "The cat sat" and rows[0]["completion"] == cat[len("The cat sat"):], rows[0]
assert rows[0]["finish_reason"] == "eod", rows[0]
assert len(rows[1]["completion_ids"]) == 3 and rows[1]["finish_reason"] == "length", rows[1]
assert rows[2]["completion"] == " on old" and rows[2]["finish_reason"] == "stop", rows[2]
assert rows[3]["finish_reason"] in ("stop", "eod"), rows[3]
# An empty prompt starts a new document: one of the sentences, whole.
assert rows[4]["completion"].strip() != "" and rows[4]["finish_reason"] == "eod", rows[4]
PY
$GEN --load llama --prompts prompts.jsonl > stdout.jsonl
same_file results.jsonl stdout.jsonl
# --json gives the same objects for stdin prompts.
printf '%s\n' "The cat sat" | $GEN --load llama --json > one.jsonl
head -1 results.jsonl | cmp -s - one.jsonl || fail "--json: $(cat one.jsonl)"

# (4) Sampling: a seed repeats itself, with any --batch (16: decode steps of more rows than the
# linear layers' groups of 8); another seed gives other answers. Empty prompts leave the sentence
# to chance.
for _ in $(seq 16); do echo '{"prompt": ""}'; done > empty.jsonl
SAMPLE="$GEN --load gpt --prompts empty.jsonl --temperature 1.0 --top-k 50 --top-p 0.95 --max-tokens 12"
$SAMPLE --seed 7 > s7a.jsonl
$SAMPLE --seed 7 --batch 3 > s7b.jsonl
same_file s7a.jsonl s7b.jsonl
$SAMPLE --seed 7 --batch 16 > s7c.jsonl
same_file s7a.jsonl s7c.jsonl
$SAMPLE --seed 8 > s8.jsonl
! cmp -s s7a.jsonl s8.jsonl || fail "seeds 7 and 8 sampled the same"
[ "$(grep -o '"completion":"[^"]*"' s7a.jsonl | sort -u | wc -l)" -gt 1 ] || fail "every prompt sampled the same"

# (5) Checkpoints in other layouts: resharded (the same parameters: the same results, ids and all),
# and trained under mpirun with tensor and pipeline parallelism (the same greedy answers).
meg-ckpt-convert -q --load llama --save llama_tp2pp2 --tp 2 --pp 2
$GEN --load llama_tp2pp2 --prompts prompts.jsonl > resharded.jsonl
same_file results.jsonl resharded.jsonl
mpi 4 $LLAMA --tp 2 --pp 2 --save llama_mpi
$GEN --load llama_mpi < prompts.txt > answers_mpi.txt
$GEN --load llama < prompts.txt > answers_llama.txt
same_file answers_llama.txt answers_mpi.txt

# A line too long for a sequence (80 byte tokens, 64 positions), after one that is not.
long=$(printf 'x%.0s' $(seq 80))
printf 'The cat sat\n%s\nRed apples\n' "$long" > long.txt

# (6) Tensor parallelism: the model split over 2 ranks under mpirun (rank 0 reads the prompts and
# writes the results) gives one process's greedy answers, from --prompt, stdin and JSONL, with
# sampling too, the vocabulary padding grown for the group or already fitting it (llama_mpi).
out=$(mpi 2 $GEN --tp 2 --load gpt --prompt "Emoji 😀")
[ "$out" = " and 日本語 façade split bytes." ] || fail "gpt --tp 2: 'Emoji 😀' gave '$out'"
mpi 2 $GEN --tp 2 --load gpt --batch 4 < prompts.txt > answers_tp.txt
same_file expected.txt answers_tp.txt
mpi 2 $GEN --tp 2 --load llama --prompts prompts.jsonl --batch 3 -o results_tp.jsonl
same_file results.jsonl results_tp.jsonl
mpi 2 $SAMPLE --tp 2 --seed 7 > s7_tp.jsonl
same_file s7a.jsonl s7_tp.jsonl
mpi 2 $GEN --tp 2 --load llama_mpi < prompts.txt > answers_mpi_tp.txt
same_file answers_llama.txt answers_mpi_tp.txt
# A bad line on stdin ends the job after the answers before it; a model that does not split over
# the ranks, or a --tp that is not the job's size, is refused.
expect_fail_mpi 1 "^meg-generate: stdin:2: the prompt is 80 tokens" -- mpi 2 $GEN --tp 2 --load gpt --batch 2 < long.txt
[ "$(cat "$WORK/.out")" = "${CAT#The cat sat}" ] || fail "--tp 2: answers before the bad line: $(cat "$WORK/.out")"
expect_fail_mpi 1 "--tp 4: the model's key/value heads \(2\) do not divide over 4 ranks" -- \
  mpi 4 $GEN --tp 4 --load llama --prompt hi
expect_fail_mpi 1 "--tp 1: meg-generate runs one process per tensor-parallel rank \(mpirun -np 1\), this job has 2" -- \
  mpi 2 $GEN --load gpt --prompt hi
expect_fail 1 "^meg-generate: --tp 2: meg-generate runs one process per tensor-parallel rank \(mpirun -np 2\), this job has 1$" -- \
  $GEN --load gpt --prompt hi --tp 2

# (7) Bad input: one line, exit 1.
expect_fail 1 "--load is required" -- meg-generate --prompt hi
expect_fail 1 "nothere: no such checkpoint directory" -- $GEN --load nothere --prompt hi
printf '{"prompt": "The cat"}\n{"prompt": "x", "top_p": 2}\n' > bad.jsonl
expect_fail 1 "^meg-generate: bad.jsonl:2: top-p 2 must be in \(0, 1\]$" -- $GEN --load gpt --prompts bad.jsonl
printf '{"prompt": "The cat"}\n{"prompt": "x"\n' > bad.jsonl
expect_fail 1 "^meg-generate: bad.jsonl:2:15: not valid JSON: syntax error" -- $GEN --load gpt --prompts bad.jsonl
expect_fail 1 "^meg-generate: bad.jsonl:2:15: not valid JSON: syntax error" -- $GEN --load gpt --prompts bad.jsonl -o out.jsonl
no_file out.jsonl
expect_fail 1 "^meg-generate: --prompt: the prompt is 80 tokens, more than the 64 a sequence holds" -- \
  $GEN --load gpt --prompt "$long"
# From stdin the answers before the bad line still come out.
expect_fail 1 "^meg-generate: stdin:2: the prompt is 80 tokens" -- $GEN --load gpt --batch 2 < long.txt
[ "$(cat "$WORK/.out")" = "${CAT#The cat sat}" ] || fail "answers before the bad line: $(cat "$WORK/.out")"
expect_fail 1 "command line: top-p 1.5 must be in \(0, 1\]" -- $GEN --load gpt --prompt hi --top-p 1.5
expect_fail 1 "command line: temperature -1 must be 0" -- $GEN --load gpt --prompt hi --temperature -1
expect_fail 1 "command line: max tokens 0 must be at least 1" -- $GEN --load gpt --prompt hi --max-tokens 0
expect_fail 1 "--max-length 65: this GPT-2 model has only 64 learned positions" -- \
  $GEN --load gpt --prompt hi --max-length 65
expect_fail 1 "--prompt and --prompts together" -- $GEN --load gpt --prompt hi --prompts prompts.jsonl
expect_fail 1 "--output applies to JSON results" -- $GEN --load gpt --prompt hi -o x.jsonl
expect_fail 1 "--precision bf16: the CPU path computes in fp32 only" -- $GEN --load gpt --prompt hi --precision bf16
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_fail 1 "--device cuda: (no CUDA device is visible|this build of meg has no CUDA support)" -- \
    meg-generate -q --load gpt --prompt hi --device cuda
fi
echo "meg-generate: all tests passed"
