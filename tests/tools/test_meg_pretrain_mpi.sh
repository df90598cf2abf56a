# meg-pretrain under mpirun on the CPU: data, tensor, sequence and pipeline parallelism (1F1B and
# interleaved) and the distributed optimizer, alone and together, train to the losses of one
# process (relative difference below 1e-5: only the order of the sums differs), with GPT and Llama,
# gradient accumulation and dropout; a run resumed under mpirun repeats the uninterrupted one
# exactly and its checkpoints load in any layout; the layouts not implemented yet and the layouts
# that do not fit are refused, ranks started with different settings stop with one line naming
# them, and a job whose rank dies or stalls ends instead of hanging.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm

# same_as_one_process MODEL_OPTIONS -- "RANKS LAYOUT_OPTIONS" ...: the model trained by one process,
# then under mpirun in each layout: every loss (and validation loss, with --eval-interval) within
# 1e-5 of one process's.
valid_losses() { grep -o '"valid_loss":[^,]*' "$1" | cut -d: -f2; }
same_as_one_process() {
  local model=()
  while [ "$1" != -- ]; do model+=("$1"); shift; done
  shift
  local run="meg-pretrain -q --device cpu ${model[*]} --data run.blend --tokenizer $M/fortunes_spm.model
             --micro-batch 2 --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 6"
  rm -f one.jsonl
  $run --metrics one.jsonl
  losses one.jsonl > one.loss
  valid_losses one.jsonl > one.valid || true
  for layout in "$@"; do
    rm -f many.jsonl
    mpi ${layout%% *} $run ${layout#* } --metrics many.jsonl
    losses many.jsonl > many.loss
    losses_close one.loss many.loss 1e-5
    if [ -s one.valid ]; then
      valid_losses many.jsonl > many.valid
      losses_close one.valid many.valid 1e-5
    fi
  done
}

for model in tiny tiny-llama; do
  # Data parallelism, with the distributed optimizer too (3 replicas: uneven shards, the last one
  # padded), and with hidden dropout: the masks follow the micro-batch's number in the global batch.
  same_as_one_process --model $model --hidden-dropout 0.1 --global-batch 8 -- "2 " "4 " "2 --use-distributed-optimizer"
  same_as_one_process --model $model --hidden-dropout 0.1 --global-batch 6 -- "3 --use-distributed-optimizer"
  # Tensor parallelism, alone, with data parallelism and with sequence parallelism (hidden dropout
  # only: attention dropout draws its masks by each rank's own heads). Pipeline parallelism
  # (1F1B), alone and with tensor or data parallelism: GPT's tied word embedding lives on the
  # first and the last stage.
  same_as_one_process --model $model --hidden-dropout 0.1 --global-batch 8 -- "2 --tp 2" "4 --tp 2" \
    "2 --tp 2 --sequence-parallel" "2 --pp 2" "4 --pp 2 --tp 2" "4 --pp 2 --dp 2" "4 --pp 2 --tp 2 --sequence-parallel"
done
same_as_one_process --model tiny --global-batch 8 -- "4 --tp 4" "4 --tp 2 --use-distributed-optimizer" \
  "4 --pp 2 --use-distributed-optimizer"
same_as_one_process --model tiny --num-layers 4 --global-batch 8 -- "4 --pp 4"
# The interleaved schedule: 4 blocks on 2 ranks of 2 model chunks (virtual stages), alone, with
# tensor and sequence parallelism, and with data parallelism and the distributed optimizer; 4
# micro-batches per replica, or 2 with --dp 2 (as many as stages: Megatron runs every forward
# first). GPT's tied word embedding lives on rank 0's first chunk and rank 1's last. Evaluation
# passes through the virtual stages in order. Then 8 blocks on 4 ranks of 2 chunks, 3 groups of 4
# micro-batches.
for model in tiny tiny-llama; do
  same_as_one_process --model $model --num-layers 4 --hidden-dropout 0.1 --global-batch 8 \
    --eval-interval 3 --eval-iters 2 -- "2 --pp 2 --virtual-stages 2" \
    "4 --pp 2 --virtual-stages 2 --tp 2 --sequence-parallel" "4 --pp 2 --virtual-stages 2 --dp 2 --use-distributed-optimizer"
done
same_as_one_process --model tiny --num-layers 8 --global-batch 24 -- "4 --pp 4 --virtual-stages 2"
expect_fail_mpi 1 "key/value heads \(2\) do not divide over 4 ranks" -- \
  mpi 4 meg-pretrain -q --device cpu --model tiny-llama --data run.blend --tokenizer $M/fortunes_spm.model \
  --micro-batch 2 --global-batch 8 --lr 3e-3 --iters 2 --tp 4
expect_fail_mpi 1 "the model's 2 blocks do not divide over 4 stages" -- \
  mpi 4 meg-pretrain -q --device cpu --model tiny --data run.blend --tokenizer $M/fortunes_spm.model \
  --micro-batch 2 --global-batch 8 --lr 3e-3 --iters 2 --pp 4

# The record holds the layout. Exact resume under mpirun (the first leg stops at iteration 3), for
# data parallelism, the distributed optimizer, tensor and pipeline parallelism; the last three
# write a file per shard, which a run of any layout (one process here) puts back together.
BASE="meg-pretrain -q --device cpu --model tiny --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 2
      --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 6"
RUN="$BASE --global-batch 8"
resumes_exactly() {  # resumes_exactly DIR OPTIONS...: 2 ranks, straight and stopped-then-resumed
  local dir=$1
  shift
  mpi 2 $RUN "$@" --metrics $dir-straight.jsonl
  mpi 2 $RUN "$@" --save $dir --exit-interval 3
  mpi 2 $RUN "$@" --save $dir --load $dir
  losses $dir-straight.jsonl > straight.loss
  losses $dir/metrics.jsonl > resumed.loss
  same_file straight.loss resumed.loss
}
one_process_continues() {  # one_process_continues DIR [MODEL_OPTIONS...]
  local dir=$1
  shift
  meg-pretrain -q --device cpu --model tiny --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 2 \
    --global-batch 8 --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 7 --load $dir --metrics $dir-single.jsonl \
    "$@" 2>/dev/null
  [ "$(grep -c '"loss"' $dir-single.jsonl)" -eq 1 ] || fail "one process could not continue the checkpoint in $dir"
}
resumes_exactly ck
python3 -c "import json,sys; r=json.load(open('ck/iter_0000006/checkpoint.json'))['record']; assert r['parallel']['dp'] == 2, r['parallel']" ||
  fail "layout not in the record"
resumes_exactly zk --use-distributed-optimizer
one_process_continues zk
# Split state is written by every rank in parallel, one file per shard.
for f in model-tp00-pp00 optimizer-tp00-pp00-dp00 optimizer-tp00-pp00-dp01; do
  [ -f zk/iter_0000006/$f.safetensors ] || fail "zk/iter_0000006/$f.safetensors missing: $(ls zk/iter_0000006)"
done
resumes_exactly tk --tp 2
one_process_continues tk
for f in model-tp00-pp00 model-tp01-pp00 optimizer-tp00-pp00 optimizer-tp01-pp00; do
  [ -f tk/iter_0000006/$f.safetensors ] || fail "tk/iter_0000006/$f.safetensors missing: $(ls tk/iter_0000006)"
done
resumes_exactly pk --pp 2
one_process_continues pk
[ -f pk/iter_0000006/model-tp00-pp01.safetensors ] || fail "pk/iter_0000006: no file of stage 1: $(ls pk/iter_0000006)"
resumes_exactly vk --num-layers 4 --pp 2 --virtual-stages 2
one_process_continues vk --num-layers 4
python3 -c "import json; r=json.load(open('vk/iter_0000006/checkpoint.json'))['record']; assert r['parallel']['virtual_stages'] == 2" ||
  fail "virtual stages not in the record"

# Checkpoints move between interleaved and other layouts mid-run: saved with virtual stages (and the
# distributed optimizer, whose moment shards follow the chunks' layout) then continued by one
# process, and the reverse, each within 1e-5 of one process's uninterrupted run.
FOUR="$RUN --num-layers 4"
$FOUR --metrics four.jsonl
losses four.jsonl > four.loss
mpi 4 $FOUR --pp 2 --virtual-stages 2 --dp 2 --use-distributed-optimizer --save vi --exit-interval 3
$FOUR --save vi --load vi 2>/dev/null
$FOUR --save vo --exit-interval 3
mpi 2 $FOUR --pp 2 --virtual-stages 2 --save vo --load vo 2>/dev/null
for dir in vi vo; do
  losses $dir/metrics.jsonl > $dir.loss
  losses_close four.loss $dir.loss 1e-5
done

# Refused layouts: the error line, exit 1, and the job ends (a rank that fails aborts them all).
expect_fail_mpi 1 "--cp 2: context parallelism is not implemented yet" -- mpi 2 $RUN --cp 2
expect_fail_mpi 1 "--sequence-parallel splits the tensor-parallel regions: it needs --tp above 1" -- \
  mpi 2 $RUN --sequence-parallel
# Every rank finds the layout wrong; whichever reports first ends the job, rank 0 or another.
expect_fail_mpi 1 "meg-pretrain( \(rank [0-9]+\))?: tp 2 x pp 1 x cp 1 x ep 1 x dp 2 = 4 processes, but the job has 3" -- \
  mpi 3 $RUN --tp 2 --dp 2
expect_fail_mpi 1 "--global-batch 6 must be a positive multiple of --micro-batch 2 times the 2 data-parallel ranks" -- \
  mpi 2 $BASE --global-batch 6
expect_fail_mpi 1 "--virtual-stages 2: the interleaved schedule needs each replica's micro-batches .* = 3\) to be a multiple of --pp 2" -- \
  mpi 2 $BASE --num-layers 4 --global-batch 6 --pp 2 --virtual-stages 2
expect_fail_mpi 1 "--pp 2 --virtual-stages 2: the model's 2 blocks do not divide over 2 x 2 virtual stages" -- \
  mpi 2 $RUN --pp 2 --virtual-stages 2
expect_fail 1 "--virtual-stages needs --pp above 1" -- $RUN --virtual-stages 2
# A job that makes no progress for MEG_COLLECTIVE_TIMEOUT seconds ends with a message (here at
# once: a millisecond is less than any step).
MEG_COLLECTIVE_TIMEOUT=0.001 expect_fail_mpi 2 "no progress for 0.001 s: a rank may be stuck in a collective" -- \
  mpi 2 -x MEG_COLLECTIVE_TIMEOUT $RUN

# Ranks started with different settings (mpirun's MPMD form) stop at once, before any collective
# that depends on them, with one line naming each option that differs and the ranks' values: a
# different --iters used to hang until the watchdog, a different --micro-batch to train wrong. The
# files that options name are compared by content: the same checkpoint by two paths agrees.
export -f mpi  # for timeout, which runs programs, not functions
ranks_disagree() {  # ranks_disagree PATTERN -- N COMMAND... : -np M COMMAND...: mpi's arguments
  local pattern=$1
  shift 2
  expect_fail_mpi 1 "^meg-pretrain: ranks disagree on $pattern\$" -- timeout 120 bash -c 'mpi "$@"' mpi "$@"
  [ "$(grep -c '^meg-pretrain' "$WORK/.err")" -eq 1 ] || fail "'$*': more than one reason: $(cat "$WORK/.err")"
}
SAME="meg-pretrain -q --device cpu --model tiny --tokenizer $M/fortunes_spm.model --data run.blend --log-interval 1
      --global-batch 12 --lr 1e-3"
ranks_disagree "--iters \\(rank 0: 3, rank 1: 4\\)" -- 1 $SAME --iters 3 : -np 1 $SAME --iters 4
ranks_disagree "--micro-batch \\(rank 0: 2, rank 2: 1\\)" -- \
  2 $SAME --iters 3 --micro-batch 2 : -np 1 $SAME --iters 3 --micro-batch 1
ranks_disagree "--iters \\(rank 0: 3, rank 1: 4\\), --lr \\(rank 0: 0.001, rank 1: 0.002\\)" -- \
  1 $SAME --iters 3 : -np 1 ${SAME/--lr 1e-3/--lr 2e-3} --iters 4
# A model option is compared through the model it resolves to.
ranks_disagree "the model's num-layers \\(rank 0: 2, rank 1: 4\\), the model's hybrid-layer-pattern \\(.*\\)" -- \
  1 $SAME --iters 3 : -np 1 $SAME --iters 3 --num-layers 4
# Another dataset (its own blend file), and another checkpoint to resume from.
meg-blend -q --seq-length 32 --samples 400 -o gpt2.blend 1 $M/fortunes_gpt2
ranks_disagree "--data \\(rank 0: [0-9a-f]{16} \\(run.blend\\), rank 1: [0-9a-f]{16} \\(gpt2.blend\\)\\)" -- \
  1 $SAME --iters 3 : -np 1 ${SAME/run.blend/gpt2.blend} --iters 3
# (Both stop short of --iters 4, which the runs that resume them then do not change.)
$SAME --iters 4 --exit-interval 2 --save ck2
$SAME --iters 4 --exit-interval 3 --save ck3
ranks_disagree "--load \\(rank 0: iter_0000002, record [0-9a-f]{16} \\(ck2\\), rank 1: iter_0000003, record [0-9a-f]{16} \\(ck3\\)\\)" -- \
  1 $SAME --iters 4 --load ck2 : -np 1 $SAME --iters 4 --load ck3
timeout 120 bash -c 'mpi "$@"' mpi 1 $SAME --iters 4 --load ck3 --metrics both.jsonl : -np 1 $SAME --iters 4 --load ck3/iter_0000003 2>/dev/null
[ "$(grep -c '"loss"' both.jsonl)" -eq 1 ] || fail "ranks loading one checkpoint by two paths did not train on"

# A rank that dies ends the job: the survivor must not wait in a collective forever.
meg-blend -q --seq-length 32 --samples 40000 -o long.blend 1 $M/fortunes_spm
LONG="meg-pretrain -q --device cpu --model tiny --data long.blend --tokenizer $M/fortunes_spm.model --micro-batch 2
      --global-batch 4 --lr 1e-3 --iters 10000 --log-interval 1 --metrics long.jsonl"
mpi 2 $LONG &
job=$!
for _ in $(seq 100); do grep -q '"loss"' long.jsonl 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -f "meg-pretrain -q --device cpu --model tiny --data long.blend" | tail -1)
[ -n "$victim" ] || fail "no rank to kill"
kill -9 "$victim"
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then
  kill -9 $job
  fail "the job did not end within 30 s of a rank dying"
fi
rc=0
wait $job || rc=$?
[ "$rc" -ne 0 ] || fail "a job with a dead rank exited 0"
echo "meg-pretrain under mpirun: all tests passed"
