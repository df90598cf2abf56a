# meg-pretrain: the tiny model learns, metrics are logged, a stopped and resumed run repeats the
# uninterrupted one loss for loss (after --exit-interval, with dropout, and after kill -9), SIGTERM
# saves and exits 0, a metrics file that cannot be written is reported and keeps whole lines, and
# bad options are refused.
# MEG_TEST_DEVICE=cuda runs it all on the GPU (scripts/gpu-test.sh does).
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
BASE="meg-pretrain -q --device ${MEG_TEST_DEVICE:-cpu} --model tiny --tokenizer $M/fortunes_spm.model --micro-batch 4 --lr 3e-3 --warmup-iters 3 --log-interval 1"
TRAIN="$BASE --data run.blend"

# (1) The loss falls; metrics carry every field; evaluation lines appear.
$TRAIN --iters 30 --global-batch 8 --eval-interval 10 --eval-iters 2 --metrics learn.jsonl
[ "$(losses learn.jsonl | wc -l)" -eq 30 ] || fail "expected 30 training lines: $(cat learn.jsonl)"
for f in iteration split consumed_tokens loss lr grad_norm ms_per_iter tokens_per_s; do
  grep -q "\"$f\":" learn.jsonl || fail "metrics lack $f"
done
[ "$(grep -c '"split":"train",' learn.jsonl)" -eq 30 ] || fail "expected 30 train records: $(cat learn.jsonl)"
[ "$(grep -c '"split":"valid","valid_loss":.*"valid_ppl":' learn.jsonl)" -eq 3 ] || fail "expected 3 evaluations: $(cat learn.jsonl)"
first=$(losses learn.jsonl | head -1)
last=$(losses learn.jsonl | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a - b > 0.5) }' || fail "loss did not fall: $first -> $last"
grep -q '"consumed_tokens":7680,' learn.jsonl || fail "consumed tokens at iteration 30"

# (2) Exact resume: 20 straight == 10, save, load, 10 more (gradient accumulation on). The first
# leg stops through --exit-interval, so both legs share the 20-iteration learning-rate schedule.
$TRAIN --iters 20 --global-batch 8 --metrics a.jsonl
$TRAIN --iters 20 --global-batch 8 --save b --exit-interval 10
[ "$(cat b/latest)" = iter_0000010 ] || fail "--exit-interval 10 saved $(cat b/latest)"
[ -f b/iter_0000010/model.safetensors ] && [ -f b/iter_0000010/optimizer.safetensors ] || fail "checkpoint files"
python3 - b/iter_0000010/checkpoint.json <<'PY' || fail "checkpoint record: $(cat b/iter_0000010/checkpoint.json)"
import json, sys
r = json.load(open(sys.argv[1]))["record"]
assert r["parallel"] == {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "virtual_stages": 1}
assert r["iteration"] == 10 and r["optimizer_step"] == 10 and r["consumed_samples"] == 80
assert r["model"]["hidden-size"] == 64 and r["options"]["global-batch"] == 8 and r["seed"] == 1234
assert len(r["blend_fingerprint"]) == 16
PY
$TRAIN --iters 20 --global-batch 8 --save b --load b
losses a.jsonl > a.loss
losses b/metrics.jsonl > b.loss
[ "$(wc -l < a.loss)" -eq 20 ] || fail "run A logged $(wc -l < a.loss) losses"
same_file a.loss b.loss

# (2b) Exact resume with dropout: the masks are a function of (seed, iteration, micro-batch), so
# the resumed run repeats the straight one; dropout changes the losses and is in the record.
DROP="--hidden-dropout 0.1 --attention-dropout 0.1"
$TRAIN --iters 20 --global-batch 8 $DROP --eval-interval 10 --eval-iters 2 --metrics da.jsonl
$TRAIN --iters 20 --global-batch 8 $DROP --eval-interval 10 --eval-iters 2 --save d --exit-interval 10
[ "$(cat d/latest)" = iter_0000010 ] || fail "--exit-interval 10 with dropout saved $(cat d/latest)"
python3 - d/iter_0000010/checkpoint.json <<'PY' || fail "dropout not in the record: $(cat d/iter_0000010/checkpoint.json)"
import json, sys
m = json.load(open(sys.argv[1]))["record"]["model"]
assert m["hidden-dropout"] == 0.1 and m["attention-dropout"] == 0.1
PY
$TRAIN --iters 20 --global-batch 8 $DROP --eval-interval 10 --eval-iters 2 --save d --load d
losses da.jsonl > da.loss
losses d/metrics.jsonl > db.loss
[ "$(wc -l < da.loss)" -eq 20 ] || fail "run A with dropout logged $(wc -l < da.loss) losses"
same_file da.loss db.loss
grep -o '"valid_loss":[^,]*' da.jsonl > da.valid
grep -o '"valid_loss":[^,]*' d/metrics.jsonl > db.valid
[ "$(wc -l < da.valid)" -eq 2 ] || fail "run A with dropout logged $(wc -l < da.valid) evaluations"
same_file da.valid db.valid
! cmp -s a.loss da.loss || fail "dropout did not change the losses"

# (3) SIGTERM: finish the iteration, save, exit 0; the checkpoint resumes.
meg-blend -q --seq-length 32 --samples 20000 -o big.blend 1 $M/fortunes_spm
BIG="meg-pretrain -q --device ${MEG_TEST_DEVICE:-cpu} --model tiny --data big.blend --tokenizer $M/fortunes_spm.model --micro-batch 4 --lr 1e-3"
$BIG --iters 5000 --save s --save-interval 5 &
pid=$!
for _ in $(seq 100); do [ -f s/iter_0000005/checkpoint.json ] && break; sleep 0.1; done
[ -f s/iter_0000005/checkpoint.json ] || fail "no first checkpoint"
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM exited $rc"
stopped=$(sed 's/^iter_0*//' s/latest)
[ "$stopped" -ge 5 ] && [ "$stopped" -lt 5000 ] || fail "latest after SIGTERM: $(cat s/latest)"
$BIG --iters $((stopped + 2)) --save s --load s --log-interval 1
grep -q "\"iteration\":$((stopped + 2))," s/metrics.jsonl || fail "resume after SIGTERM did not continue"

# (4) kill -9 after a saved checkpoint: the resumed run repeats the uninterrupted one loss for loss.
$BIG --iters 5000 --save k --save-interval 5 --log-interval 1 &
pid=$!
for _ in $(seq 100); do [ -f k/iter_0000010/checkpoint.json ] && break; sleep 0.1; done
[ -f k/iter_0000010/checkpoint.json ] || fail "no checkpoint at iteration 10"
kill -KILL $pid
wait $pid || true
saved=$(sed 's/^iter_0*//' k/latest)
$BIG --iters 5000 --save k --load k --log-interval 1 --exit-interval 5 --metrics resumed.jsonl
$BIG --iters 5000 --log-interval 1 --exit-interval $((saved + 5)) --metrics straight.jsonl
pairs() { sed -n 's/.*"iteration":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
pairs resumed.jsonl > resumed.pairs
pairs straight.jsonl > straight.pairs
[ "$(wc -l < resumed.pairs)" -eq 5 ] || fail "the resumed run logged $(wc -l < resumed.pairs) steps"
[ "$(grep -cxFf resumed.pairs straight.pairs)" -eq 5 ] || fail "resumed losses differ: $(cat resumed.pairs)"

# (5) A metrics file that cannot be written stops the run at once with one line, and the file
# keeps whole lines: on a full disk, and past a file size limit (ulimit -f, with SIGXFSZ ignored,
# so that the 5th line is written in part: the part comes off again).
expect_fail 1 "^meg-pretrain: /dev/full: cannot write the metrics: No space left on device$" -- \
  $TRAIN --iters 20 --metrics /dev/full
expect_fail 1 "^meg-pretrain: limited.jsonl: cannot write the metrics: File too large$" -- \
  bash -c "trap '' XFSZ; ulimit -f 1; exec $TRAIN --iters 20 --metrics limited.jsonl"
python3 - limited.jsonl <<'PY' || fail "limited.jsonl does not hold whole lines: $(cat limited.jsonl)"
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n") and 0 < len(text) <= 1024, len(text)
assert [json.loads(line)["iteration"] for line in text.splitlines()] == list(range(1, text.count("\n") + 1))
PY

# (6) Bad options.
expect_fail 1 "--global-batch 6 must be a positive multiple of --micro-batch 4" -- $TRAIN --iters 2 --global-batch 6
expect_fail 1 "nothere.blend" -- $BASE --iters 2 --data nothere.blend
NODEV="meg-pretrain -q --model tiny --tokenizer $M/fortunes_spm.model --data run.blend --iters 2 --lr 1e-3"
expect_fail 1 "--device 'tpu': expected cpu or cuda" -- $NODEV --device tpu
expect_fail 1 "--precision bf16: the CPU path computes in fp32 only" -- $NODEV --device cpu --precision bf16
expect_fail 1 "--precision 'fp8': expected bf16, fp16 or fp32" -- $NODEV --precision fp8
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_fail 1 "--device cuda: (no CUDA device is visible|this build of meg has no CUDA support)" -- $NODEV --device cuda
fi
expect_fail 1 "checkpoint.json: the checkpoint's model config differs .*hidden-size" -- \
  $TRAIN --iters 20 --global-batch 8 --load b --hidden-size 128
meg-blend -q --seq-length 32 --samples 400 --seed 7 -o other.blend 1 $M/fortunes_spm
expect_fail 1 "checkpoint.json: .*fingerprint .*other.blend" -- $BASE --iters 20 --global-batch 8 --load b --data other.blend
expect_fail 1 "--seq-length 64 differs from the sequence length 32 of run.blend" -- $TRAIN --iters 2 --seq-length 64
expect_fail 1 "hidden-dropout must be in \[0, 1\)" -- $TRAIN --iters 2 --hidden-dropout 1
expect_fail 1 "checkpoint.json: the checkpoint's model config differs .*hidden-dropout" -- \
  $TRAIN --iters 20 --global-batch 8 --load d --hidden-dropout 0.2 --attention-dropout 0.1
echo "meg-pretrain: all tests passed"
