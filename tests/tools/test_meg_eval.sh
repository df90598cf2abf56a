# meg-eval on a small trained model: every task type and JSONL form (and an indexed dataset)
# gives its metrics as JSON with the documented fields, consistent with the per-request
# log-likelihoods of --per-example; few-shot prompts are deterministic; --limit, --batch and the
# table; a checkpoint trained with --tp 2 under mpirun scores as its single-rank conversion;
# bad input is refused with one line and exit status 1.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
E=$MEG_TEST_DATA/eval
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
TRAIN="meg-pretrain -q --device cpu --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 4
       --global-batch 8 --lr 3e-3 --warmup-iters 2 --iters 20"
$TRAIN --model tiny --save gpt 2>/dev/null
EVAL="meg-eval -q --device cpu --load gpt"

# check_results JSON PER_EXAMPLE TYPE DOCS METRICS...: the results name the task type and the
# number of documents, hold exactly METRICS (and their stderr for acc and acc_norm), and the
# metrics follow from the per-request log-likelihoods.
check_results() {
  python3 - "$@" <<'PY' || fail "results of $1: $(cat "$1")"
import json, math, sys
path, per_path, kind, docs, *names = sys.argv[1:]
r = json.load(open(path))
per = [json.loads(l) for l in open(per_path)]
assert r["task_type"] == kind and r["documents"] == int(docs), (r["task_type"], r["documents"])
assert r["requests"] == len(per) and r["device"] == "cpu" and r["precision"] == "fp32"
assert r["model"]["family"] in ("gpt2", "llama") and r["model"]["max_length"] == 32
expected = set(names) | {n + "_stderr" for n in names if n.startswith("acc")}
assert set(r["metrics"]) == expected, (sorted(r["metrics"]), sorted(expected))
m = r["metrics"]
by_doc = {}
for p in per:
    assert set(p) >= {"doc", "line", "index", "context_tokens", "continuation_tokens", "loglikelihood", "is_greedy"}
    by_doc.setdefault(p["doc"], []).append(p)
assert sorted(by_doc) == list(range(int(docs)))
close = lambda a, b: abs(a - b) <= 1e-9 * max(1.0, abs(b))
if kind == "lambada":
    lls = [ps[0]["loglikelihood"] for ps in by_doc.values()]
    assert close(m["acc"], sum(ps[0]["is_greedy"] for ps in by_doc.values()) / len(lls))
    assert close(m["perplexity"], math.exp(-sum(lls) / len(lls)))
elif kind == "multiple-choice":
    # The first choice of highest log-likelihood, as is or per character of the choice's text.
    argmax = lambda xs: max(range(len(xs)), key=lambda i: (xs[i], -i))
    acc = acc_norm = 0
    for ps in by_doc.values():
        assert [p["index"] for p in ps] == list(range(len(ps))) and all(p["continuation"][0] == " " for p in ps)
        lls = [p["loglikelihood"] for p in ps]
        acc += argmax(lls) == ps[0]["gold"]
        acc_norm += argmax([ll / len(p["continuation"][1:]) for ll, p in zip(lls, ps)]) == ps[0]["gold"]
    assert close(m["acc"], acc / len(by_doc)) and close(m["acc_norm"], acc_norm / len(by_doc)), (m, acc, acc_norm)
else:
    ll = sum(p["loglikelihood"] for p in per)
    tokens = sum(len(p["continuation_tokens"]) for p in per)
    assert close(m["token_perplexity"], math.exp(-ll / tokens))
    assert all(len(p["context_tokens"]) + len(p["continuation_tokens"]) <= 33 for p in per)
for v in m.values():
    assert math.isfinite(v), m
PY
}

run_task() {  # run_task FILE TYPE DOCS METRICS...
  local file=$1 type=$2
  $EVAL --task $file --task-type $type --json --per-example per.jsonl > res.json
  check_results res.json per.jsonl "$type" "${@:3}"
}
run_task $E/lambada.jsonl lambada 8 acc perplexity
for form in hellaswag:5 arc:5 piqa:4 openbookqa:3 choices:4; do
  run_task $E/${form%%:*}.jsonl multiple-choice ${form##*:} acc acc_norm
done
run_task $E/text.jsonl perplexity 4 word_perplexity byte_perplexity bits_per_byte token_perplexity
run_task $E/wikitext.jsonl perplexity 2 word_perplexity byte_perplexity bits_per_byte token_perplexity
# Documents longer than the model's 32 tokens are scored in several windows.
[ "$(grep -c '"doc":0,' per.jsonl)" -gt 1 ] || fail "wikitext's first page was not split into windows"
# An indexed dataset: its documents' tokens, the first 20.
$EVAL --task $M/fortunes_spm --task-type perplexity --limit 20 --json --per-example per.jsonl > res.json
check_results res.json per.jsonl perplexity 20 token_perplexity
grep -q '"source": "indexed-dataset"' res.json || fail "source of an indexed dataset: $(cat res.json)"

# The batch changes nothing but the speed (CPU rows are independent).
$EVAL --task $E/hellaswag.jsonl --task-type multiple-choice --json --per-example a.jsonl --batch 1 > /dev/null
$EVAL --task $E/hellaswag.jsonl --task-type multiple-choice --json --per-example b.jsonl --batch 16 > /dev/null
python3 - a.jsonl b.jsonl <<'PY' || fail "--batch 1 and --batch 16 score differently"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 20
assert all(x["context_tokens"] == y["context_tokens"] and abs(x["loglikelihood"] - y["loglikelihood"]) < 1e-5
           for x, y in zip(a, b))
PY

# Few-shot: examples before each prompt, the same on every run, others with another seed.
FEW="$EVAL --task $E/arc.jsonl --task-type multiple-choice --num-fewshot 2 --limit 3"
$FEW --json --per-example f1.jsonl > few.json
$FEW --json --per-example f2.jsonl > /dev/null
same_file f1.jsonl f2.jsonl
$FEW --json --per-example f3.jsonl --fewshot-seed 7 > /dev/null
! cmp -s f1.jsonl f3.jsonl || fail "--fewshot-seed 7 drew the same examples as 1234"
python3 - f1.jsonl few.json <<'PY' || fail "few-shot prompts: $(head -c 600 f1.jsonl)"
import json, sys
per = [json.loads(l) for l in open(sys.argv[1])]
r = json.load(open(sys.argv[2]))
assert r["num_fewshot"] == 2 and r["fewshot_seed"] == 1234 and r["documents"] == 3
for p in per:
    assert p["context"].count("Question: ") == 3 and p["context"].count("\n\n") == 2, p["context"]
PY
$EVAL --task $E/lambada.jsonl --task-type lambada --num-fewshot 1 --fewshot-file $E/lambada.jsonl --limit 2 \
  --json > /dev/null

# The table.
$EVAL --task $E/piqa.jsonl --task-type multiple-choice > table.txt
grep -q '^|task *|type *|n-shot|documents|metric *| *value|stderr|$' table.txt || fail "table header: $(cat table.txt)"
grep -q '^|piqa.jsonl|multiple-choice|     0|        4|acc ' table.txt || fail "table row: $(cat table.txt)"

# Tensor parallelism: trained on 2 ranks (a vocabulary padded differently for tp 2) and converted to
# one rank, the model scores the same: every field alike, the log-likelihoods within fp32 rounding
# (the output layer's product has another width, which a BLAS may sum in another order).
mpi 2 $TRAIN --model tiny-llama --vocab-size 2100 --tp 2 --save tp2 2>/dev/null
meg-ckpt-convert -q --load tp2 --save tp1 --tp 1
for ck in tp2 tp1; do
  meg-eval -q --device cpu --load $ck --task $E/lambada.jsonl --task-type lambada --json --per-example $ck.jsonl > $ck.json
done
python3 - tp2.jsonl tp1.jsonl tp2.json tp1.json <<'PY' || fail "tp 2 and its conversion score differently"
import json, sys
def alike(x, y):
    if isinstance(x, float):
        return abs(x - y) <= 1e-5 * max(1.0, abs(y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(alike(x[k], y[k]) for k in x)
    return x == y
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) > 0
for x, y in zip(a, b):
    assert alike(x, y), (x, y)
metrics = [json.load(open(p))["metrics"] for p in sys.argv[3:]]
assert alike(*metrics), metrics
PY

# Bad input: one line naming the file and line, exit 1.
printf '{"text": "a b"}\n{"text": "a b",}\n' > bad.jsonl
expect_fail 1 "^meg-eval: bad.jsonl:2:16: not valid JSON: syntax error" -- $EVAL --task bad.jsonl --task-type lambada
printf '{"query": "Q", "choices": ["a", "b"], "gold": 0}\n\n{"query": "Q", "choices": ["a", "b"]}\n' > bad.jsonl
expect_fail 1 'bad.jsonl:3: no "gold" or "label" field' -- $EVAL --task bad.jsonl --task-type multiple-choice
printf '{"goal": "G", "sol1": "a", "sol2": "b", "label": 2}\n' > bad.jsonl
expect_fail 1 "bad.jsonl:1: gold 2 is out of range for 2 choices" -- $EVAL --task bad.jsonl --task-type multiple-choice
printf '{"question": "Q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "C"}\n' > bad.jsonl
expect_fail 1 'bad.jsonl:1: answerKey "C" is not one of the choice labels \(A\)' -- \
  $EVAL --task bad.jsonl --task-type multiple-choice
expect_fail 1 "--task-type 'mmlu': expected perplexity, lambada or multiple-choice" -- \
  $EVAL --task $E/arc.jsonl --task-type mmlu
expect_fail 1 "--load is required" -- meg-eval --task $E/arc.jsonl --task-type multiple-choice
expect_fail 1 "--task is required" -- $EVAL --task-type multiple-choice
expect_fail 1 "nothere.jsonl" -- $EVAL --task nothere.jsonl --task-type lambada
expect_fail 1 "nothere" -- meg-eval --load nothere --task $E/arc.jsonl --task-type multiple-choice
expect_fail 1 "--num-fewshot 1: perplexity scores whole documents" -- \
  $EVAL --task $E/text.jsonl --task-type perplexity --num-fewshot 1
expect_fail 1 "arc.jsonl: --num-fewshot 5 draws 6 examples" -- \
  $EVAL --task $E/arc.jsonl --task-type multiple-choice --num-fewshot 5
expect_fail 1 "--precision bf16: the CPU path computes in fp32 only" -- \
  $EVAL --task $E/arc.jsonl --task-type multiple-choice --precision bf16
expect_fail 1 "--batch must be at least 1, got 0" -- $EVAL --task $E/arc.jsonl --task-type multiple-choice --batch 0
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_fail 1 "--device cuda: (no CUDA device is visible|this build of meg has no CUDA support)" -- \
    meg-eval --device cuda --load gpt --task $E/arc.jsonl --task-type multiple-choice
fi
# A choice longer than the model's context.
python3 -c "import json; print(json.dumps({'query': 'Q', 'choices': ['a', ' '.join(['word'] * 40)], 'gold': 0}))" > bad.jsonl
expect_fail 1 "bad.jsonl:1: choice 1 is [0-9]+ tokens, more than the model's context of 32" -- \
  $EVAL --task bad.jsonl --task-type multiple-choice
echo "meg-eval: all tests passed"
