# meg-generate with the model split over 2 GPUs (mpirun -np 2 --tp 2, through NCCL) against one
# GPU: a small GPT-2 (biases, learned positions, tied embedding) and a small Llama (2 query heads
# per key/value head) trained briefly give the same greedy completions in fp32, from JSONL and
# from stdin, with several slots at once (continuous batching, and decode steps captured into CUDA
# graphs with the collectives in them); bf16 completions mostly agree; GPT-2 over 4 GPUs too.
# Sampled completions, which every member draws alike on its GPU from the gathered
# logits: greedy with a repetition penalty gives one GPU's; top-p, top-k and top-p with a penalty
# repeat with the seed and give one GPU's for most prompts. Runs on MEG_TEST_RANKS ranks (2 unless
# set; GPT-2 over 4 is a test of its own, tests/CMakeLists.txt) and needs as many GPUs: with fewer
# it says so and is skipped.
source "$(dirname "$0")/../tools/lib.sh"
ranks=${MEG_TEST_RANKS:-2}
require_gpus "$ranks" "meg-generate split over $ranks GPUs"
export NCCL_NVLS_ENABLE=0
M=$MEG_TEST_DATA/megatron
printf '%s\n' "The fortune" "A" "You will" "Never trust a" "Love is" "The best way to" > prompts.txt
python3 -c '
import json
for line in open("prompts.txt"): print(json.dumps({"prompt": line.rstrip("\n")}))' > prompts.jsonl

# same_ids A B [AT_LEAST]: the JSON results A and B hold the same completion ids for at least
# AT_LEAST of their 6 prompts (default: all).
same_ids() {
  python3 - "$1" "$2" "${3:-6}" <<'PY' || fail "$model: $2's completions differ from $1's"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 6
agree = sum(x["completion_ids"] == y["completion_ids"] for x, y in zip(a, b))
assert agree >= int(sys.argv[3]), [(x["completion_ids"], y["completion_ids"]) for x, y in zip(a, b)]
PY
}

for model in tiny tiny-llama; do
  if [ "$ranks" = 4 ] && [ "$model" != tiny ]; then continue; fi
  meg-blend -q --seq-length 64 --samples 2000 -o $model.blend 1 $M/fortunes_spm
  meg-pretrain -q --device cpu --model $model --data $model.blend --tokenizer $M/fortunes_spm.model \
    --micro-batch 8 --global-batch 16 --lr 3e-3 --warmup-iters 10 --iters 100 --save $model
  GEN="meg-generate -q --device cuda --load $model --max-tokens 32 --batch 4"
  $GEN --precision fp32 --prompts prompts.jsonl -o one.jsonl
  if [ "$ranks" = 4 ]; then
    mpi 4 -x NCCL_NVLS_ENABLE $GEN --tp 4 --precision fp32 --prompts prompts.jsonl -o four.jsonl
    same_ids one.jsonl four.jsonl
    continue
  fi
  mpi 2 -x NCCL_NVLS_ENABLE $GEN --tp 2 --precision fp32 --prompts prompts.jsonl -o two.jsonl
  same_ids one.jsonl two.jsonl
  $GEN --precision fp32 < prompts.txt > one.txt
  mpi 2 -x NCCL_NVLS_ENABLE $GEN --tp 2 --precision fp32 < prompts.txt > two.txt
  same_file one.txt two.txt
  # The group's sums round otherwise than one GPU's, so a draw within rounding of the boundary
  # between two tokens may fall the other way: most prompts agree; greedy choices all do.
  $GEN --precision fp32 --repetition-penalty 1.3 --prompts prompts.jsonl -o one.jsonl
  mpi 2 -x NCCL_NVLS_ENABLE $GEN --tp 2 --precision fp32 --repetition-penalty 1.3 --prompts prompts.jsonl -o two.jsonl
  same_ids one.jsonl two.jsonl
  for sampling in "--temperature 0.8 --top-p 0.9" "--temperature 0.9 --top-k 20" \
                  "--temperature 0.8 --top-p 0.9 --repetition-penalty 1.2"; do
    $GEN --precision fp32 $sampling --seed 7 --prompts prompts.jsonl -o one.jsonl
    for run in 1 2; do
      mpi 2 -x NCCL_NVLS_ENABLE $GEN --tp 2 --precision fp32 $sampling --seed 7 --prompts prompts.jsonl \
        -o two-$run.jsonl
    done
    same_ids two-1.jsonl two-2.jsonl
    same_ids one.jsonl two-1.jsonl 5
  done
  # bf16 rounds the sums differently: the first tokens agree for most prompts.
  $GEN --prompts prompts.jsonl -o one-bf16.jsonl
  mpi 2 -x NCCL_NVLS_ENABLE $GEN --tp 2 --prompts prompts.jsonl -o two-bf16.jsonl
  python3 - one-bf16.jsonl two-bf16.jsonl <<'PY' || fail "$model: bf16 completions over 2 GPUs differ from one GPU's"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 6
agree = sum(x["completion_ids"][:4] == y["completion_ids"][:4] for x, y in zip(a, b))
assert agree >= 4, [(x["completion_ids"], y["completion_ids"]) for x, y in zip(a, b)]
PY
done
echo "meg-generate split over $ranks GPUs: all tests passed"
