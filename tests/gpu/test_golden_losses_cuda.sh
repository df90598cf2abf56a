# Golden values on one GPU (tests/tools/golden.sh): a tiny GPT and a tiny Llama in fp32 and in
# bf16, each equal to its committed losses, gradient norms and validation losses to the last bit
# (the CUDA path's reductions run in a fixed order, so a run repeats exactly).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../tools/lib.sh"
require_gpus 1 "golden losses on the GPU"
source "$HERE/../tools/golden.sh"
for model in tiny tiny-llama; do
  for precision in fp32 bf16; do
    golden $model-cuda-$precision -- --device cuda --precision $precision --model $model
  done
done
echo "golden losses on the GPU: identical"
