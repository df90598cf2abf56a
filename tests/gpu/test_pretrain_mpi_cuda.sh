# meg-pretrain under mpirun on GPUs, through NCCL: data parallelism with and without the
# distributed optimizer, tensor parallelism (with and without sequence parallelism) and pipeline
# parallelism (alone, and with 4 GPUs combined with each other and with data parallelism) train to
# the losses of one GPU (fp32: relative difference below 1e-5; bf16 and fp16: below 1e-2, their
# rounding amplifying the different order of the sums); a run resumed under mpirun repeats the
# uninterrupted one exactly; tensor- and pipeline-parallel checkpoints continue on one GPU. Runs the
# checks on MEG_TEST_RANKS ranks (2 unless set; the 4-rank layouts are a test of their own,
# tests/CMakeLists.txt) and needs as many GPUs: with fewer it says so and is skipped.
source "$(dirname "$0")/../tools/lib.sh"
ranks=${MEG_TEST_RANKS:-2}
require_gpus "$ranks" "meg-pretrain under mpirun on $ranks GPUs"
export NCCL_NVLS_ENABLE=0
M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 64 --samples 400 -o run.blend 1 $M/fortunes_spm
BASE="meg-pretrain -q --device cuda --model tiny-llama --data run.blend --tokenizer $M/fortunes_spm.model
      --micro-batch 4 --global-batch 16 --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 8 --hidden-dropout 0.1"
# compare N TOLERANCE ARGS...: N ranks with ARGS train to one.loss's losses (in the run on N ranks).
compare() {
  local n=$1 tolerance=$2
  shift 2
  [ "$n" = "$ranks" ] || return 0
  rm -f many.jsonl  # metrics files are appended to
  mpi "$n" -x NCCL_NVLS_ENABLE "$@" --metrics many.jsonl
  losses many.jsonl > many.loss
  losses_close one.loss many.loss "$tolerance"
}
for precision in fp32 bf16 fp16; do
  tolerance=1e-2
  [ $precision = fp32 ] && tolerance=1e-5
  $BASE --precision $precision --metrics one-$precision.jsonl
  losses one-$precision.jsonl > one.loss
  for zero in "" --use-distributed-optimizer; do
    compare 2 $tolerance $BASE --precision $precision $zero
  done
  compare 2 $tolerance $BASE --precision $precision --tp 2
  compare 2 $tolerance $BASE --precision $precision --tp 2 --sequence-parallel
  compare 2 $tolerance $BASE --precision $precision --pp 2
  compare 4 $tolerance $BASE --precision $precision --tp 2
  compare 4 $tolerance $BASE --precision $precision --tp 2 --use-distributed-optimizer
  compare 4 $tolerance $BASE --precision $precision --tp 2 --pp 2
  compare 4 $tolerance $BASE --precision $precision --tp 2 --pp 2 --sequence-parallel
  compare 4 $tolerance $BASE --precision $precision --pp 2 --use-distributed-optimizer
done
# GPT-2 (learned positions, biases, tied embeddings, GELU) over 2 and 4 tensor-parallel ranks, with
# and without sequence parallelism (which sums the norms' and position embedding's gradients).
GPT="meg-pretrain -q --device cuda --model tiny --data run.blend --tokenizer $M/fortunes_spm.model
     --micro-batch 4 --global-batch 8 --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 6 --precision fp32"
$GPT --metrics gpt-one.jsonl
losses gpt-one.jsonl > one.loss
compare 2 1e-5 $GPT --tp 2
compare 2 1e-5 $GPT --tp 2 --sequence-parallel
compare 2 1e-5 $GPT --pp 2 --eval-interval 3 --eval-iters 2  # tied embedding copies; evaluation
compare 4 1e-5 $GPT --tp 4
compare 4 1e-5 $GPT --tp 4 --sequence-parallel
compare 4 1e-5 $GPT --pp 2 --dp 2

# The interleaved schedule: 2 virtual stages per rank, alone, with tensor parallelism and with
# data parallelism and the distributed optimizer; GPT-2's tied embedding copies on 2 ranks.
for precision in fp32 bf16; do
  tolerance=1e-2
  [ $precision = fp32 ] && tolerance=1e-5
  $BASE --num-layers 4 --precision $precision --metrics four-$precision.jsonl
  losses four-$precision.jsonl > one.loss
  compare 2 $tolerance $BASE --num-layers 4 --precision $precision --pp 2 --virtual-stages 2
  compare 4 $tolerance $BASE --num-layers 4 --precision $precision --pp 2 --virtual-stages 2 --tp 2
  compare 4 $tolerance $BASE --num-layers 4 --precision $precision --pp 2 --virtual-stages 2 --dp 2 \
    --use-distributed-optimizer
done
$GPT --num-layers 4 --metrics gpt-four.jsonl
losses gpt-four.jsonl > one.loss
compare 2 1e-5 $GPT --num-layers 4 --pp 2 --virtual-stages 2 --eval-interval 3 --eval-iters 2

if [ "$ranks" = 2 ]; then
  # Tensor- and pipeline-parallel checkpoints continue on one GPU, near the parallel run's losses.
  for layout in "--tp 2" "--pp 2"; do
    rm -rf ck split.jsonl
    mpi 2 -x NCCL_NVLS_ENABLE $BASE $layout --metrics split.jsonl
    mpi 2 -x NCCL_NVLS_ENABLE $BASE $layout --save ck --exit-interval 4
    $BASE --load ck --save ck
    losses split.jsonl > one.loss
    losses ck/metrics.jsonl > many.loss
    losses_close one.loss many.loss 1e-2
  done

  # Exact resume under mpirun, with and without the distributed optimizer (whose checkpoint gathers
  # the shards), and with tensor (and sequence) and pipeline parallelism.
  for zero in "" --use-distributed-optimizer "--tp 2" "--tp 2 --sequence-parallel" "--pp 2"; do
    rm -rf ck straight.jsonl
    mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --metrics straight.jsonl
    mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --save ck --exit-interval 4
    mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --save ck --load ck
    losses straight.jsonl > straight.loss
    losses ck/metrics.jsonl > resumed.loss
    same_file straight.loss resumed.loss
  done
fi
echo "meg-pretrain under mpirun on $ranks GPUs: all tests passed"
