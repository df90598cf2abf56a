# Golden values on the CPU (tests/tools/golden.sh): a tiny GPT and a tiny Llama in one process,
# and under mpirun with tensor parallelism (2 ranks) and pipeline parallelism (2 stages), each
# equal to its committed losses, gradient norms and validation losses to the last bit, on the
# platform the files were written on (require_golden_platform, tests/tools/lib.sh).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export MEG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
require_golden_platform "golden losses on the CPU"
source "$HERE/golden.sh"
for model in tiny tiny-llama; do
  golden $model-cpu -- --device cpu --model $model
  golden $model-cpu-tp2 mpi 2 -- --device cpu --model $model --tp 2
  golden $model-cpu-pp2 mpi 2 -- --device cpu --model $model --pp 2
done
echo "golden losses: identical"
