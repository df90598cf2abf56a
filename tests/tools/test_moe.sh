# meg-pretrain with MoE layers on the CPU: tiny-moe trains (the loss falls, the auxiliary losses
# are logged under Megatron's names), a run continued from its checkpoint repeats the
# uninterrupted one's losses, the record holds the MoE settings, the MoE options reach the model,
# and bad MoE settings are refused in one line each.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
SPM=$M/fortunes_spm.model
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
TRAIN="meg-pretrain -q --device cpu --model tiny-moe --tokenizer $SPM --data run.blend --micro-batch 4 --global-batch 8
       --lr 3e-3 --warmup-iters 3 --log-interval 1"
record() { python3 -c "import json, sys; print(json.load(open('$1/checkpoint.json'))['record']$2)"; }

# (1) It trains: the loss falls; each line has load_balancing_loss and z_loss, the log line too.
$TRAIN --iters 20 --metrics straight.jsonl
python3 - straight.jsonl <<'PY' || fail "tiny-moe did not train: $(cat straight.jsonl)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 20 and lines[-1]["loss"] < lines[0]["loss"] - 0.3, [l["loss"] for l in lines]
assert all(0.5 < l["load_balancing_loss"] < 2 and l["z_loss"] > 0 for l in lines)
PY
meg-pretrain --device cpu --model tiny-moe --tokenizer $SPM --data run.blend --micro-batch 4 --lr 3e-3 --iters 1 \
  2>line.err
grep -q "| loss [0-9.]* | load_balancing_loss [0-9.]* | z_loss [0-9.]* | lr" line.err ||
  fail "no MoE losses in the log line: $(cat line.err)"
grep -q "MoE in 2 of 2 blocks: 4 experts of ffn 64, top-2 softmax" line.err || fail "no MoE in the model line"

# (2) Exact resume: 10 iterations, a checkpoint, 10 more repeat the uninterrupted run.
$TRAIN --iters 20 --save r --exit-interval 10
meg-pretrain -q --device cpu --load r --save r
losses straight.jsonl > straight.loss
losses r/metrics.jsonl > r.loss
same_file straight.loss r.loss
[ "$(record r/iter_0000020 "['model']['num-experts']")" = 4 ] || fail "no num-experts in the record"
[ "$(record r/iter_0000020 "['model']['moe-router-topk']")" = 2 ] || fail "no moe-router-topk in the record"
[ "$(record r/iter_0000020 "['model']['hybrid-layer-pattern']")" = "*E*E" ] || fail "the record's pattern"

# (3) The options reach the model: sigmoid routing with the expert bias, capacity, shared experts
# with a gate, a layer pattern from moe-layer-freq; tiny-llama becomes MoE by --num-experts.
$TRAIN --iters 4 --save o --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
  --moe-expert-capacity-factor 1.5 --moe-token-drop-policy position --moe-pad-expert-input-to-capacity \
  --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --moe-layer-freq "([0]*1+[1]*1)" \
  --moe-router-load-balancing-type seq_aux_loss --moe-router-dtype fp64
[ "$(record o/iter_0000004 "['model']['hybrid-layer-pattern']")" = "*-*E" ] || fail "moe-layer-freq not applied"
[ "$(record o/iter_0000004 "['model']['moe-expert-capacity-factor']")" = 1.5 ] || fail "capacity not recorded"
[ "$(record o/iter_0000004 "['model']['moe-router-dtype']")" = fp64 ] || fail "router dtype not recorded"
meg-pretrain -q --device cpu --model tiny-llama --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 \
  --tokenizer $SPM --data run.blend --micro-batch 4 --lr 1e-3 --iters 1 --save l
[ "$(record l/iter_0000001 "['model']['num-experts']")" = 8 ] || fail "--num-experts did not reach tiny-llama"

# (4) Bad settings: one line each.
BAD="meg-pretrain --device cpu --model tiny-moe --tokenizer $SPM --data run.blend --micro-batch 4 --lr 1e-3 --iters 1"
expect_fail 1 "moe-router-topk 5 exceeds num-experts 4" -- $BAD --moe-router-topk 5
expect_fail 1 "moe-router-score-function 'tanh' is not one of softmax, sigmoid" -- $BAD --moe-router-score-function tanh
expect_fail 1 "moe-layer-freq \"\[1\]\*3\" has 3 entries for 2 blocks" -- $BAD --moe-layer-freq "[1]*3"
expect_fail 1 "moe-layer-freq \"range\(2\)\": expected '\[' or '\('" -- $BAD --moe-layer-freq "range(2)"
expect_fail 1 "moe-router-enable-expert-bias needs moe-router-score-function sigmoid" -- $BAD \
  --moe-router-enable-expert-bias
expect_fail 1 "moe-pad-expert-input-to-capacity needs moe-expert-capacity-factor" -- $BAD \
  --moe-pad-expert-input-to-capacity
expect_fail 1 "global_aux_loss is not implemented" -- $BAD --moe-router-load-balancing-type global_aux_loss
expect_fail 1 "moe-router-dtype 'bf16' is not one of fp32, fp64" -- $BAD --moe-router-dtype bf16
expect_fail 1 "num-experts" -- $BAD --num-experts x
expect_fail_mpi 1 "MoE layers run on one tensor-parallel rank for now" -- mpi 2 $BAD --tp 2
echo '{"preset": "tiny-moe", "moe-aux-loss-coeff": -1}' > bad.json
expect_fail 1 "bad.json: moe-aux-loss-coeff must be at least 0" -- $BAD --model-config bad.json
