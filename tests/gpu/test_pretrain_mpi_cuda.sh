# meg-pretrain under mpirun on GPUs, data parallelism through NCCL, with and without the distributed
# optimizer: 2 ranks on 2 GPUs train to the losses of one GPU (fp32: relative difference below
# 1e-5; bf16 and fp16: below 1e-2, their rounding amplifying the different order of the gradient
# sums), and a run resumed under mpirun repeats the uninterrupted one exactly. Needs 2 GPUs; with fewer it says so and checks nothing.
source "$(dirname "$0")/../tools/lib.sh"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -lt 2 ]; then
  echo "meg-pretrain under mpirun on GPUs: skipped, $gpus GPU(s) visible, 2 needed"
  exit 0
fi
export NCCL_NVLS_ENABLE=0
M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 64 --samples 400 -o run.blend 1 $M/fortunes_spm
BASE="meg-pretrain -q --device cuda --model tiny-llama --data run.blend --tokenizer $M/fortunes_spm.model
      --micro-batch 4 --global-batch 16 --lr 3e-3 --warmup-iters 2 --log-interval 1 --iters 8 --hidden-dropout 0.1"
for precision in fp32 bf16 fp16; do
  tolerance=1e-2
  [ $precision = fp32 ] && tolerance=1e-5
  $BASE --precision $precision --metrics one-$precision.jsonl
  losses one-$precision.jsonl > one.loss
  for zero in "" --use-distributed-optimizer; do
    rm -f two.jsonl  # metrics files are appended to
    mpi 2 -x NCCL_NVLS_ENABLE $BASE --precision $precision $zero --metrics two.jsonl
    losses two.jsonl > two.loss
    losses_close one.loss two.loss $tolerance
  done
done

# Exact resume under mpirun, with and without the distributed optimizer (whose checkpoint gathers
# the shards).
for zero in "" --use-distributed-optimizer; do
  rm -rf ck straight.jsonl
  mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --metrics straight.jsonl
  mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --save ck --exit-interval 4
  mpi 2 -x NCCL_NVLS_ENABLE $BASE $zero --save ck --load ck
  losses straight.jsonl > straight.loss
  losses ck/metrics.jsonl > resumed.loss
  same_file straight.loss resumed.loss
done
echo "meg-pretrain under mpirun on GPUs: all tests passed"
