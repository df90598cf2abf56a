# meg-generate and meg-eval on the GPU against the CPU: a small GPT-2 and a small Llama trained
# briefly give the same greedy completions on both devices in fp32 (several slots at once, so
# continuous batching and decode graphs are exercised), completions in bf16 that mostly agree, and
# the same per-request log-likelihoods (within 1e-4) and greedy flags from meg-eval.
source "$(dirname "$0")/../tools/lib.sh"
require_gpus 1 "meg-generate and meg-eval on the GPU"
M=$MEG_TEST_DATA/megatron
E=$MEG_TEST_DATA/eval
for model in tiny tiny-llama; do
  meg-blend -q --seq-length 64 --samples 2000 -o $model.blend 1 $M/fortunes_spm
  meg-pretrain -q --device cpu --model $model --data $model.blend --tokenizer $M/fortunes_spm.model \
    --micro-batch 8 --global-batch 16 --lr 3e-3 --warmup-iters 10 --iters 100 --save $model
  printf '%s\n' "The fortune" "A" "You will" "Never trust a" "Love is" "The best way to" > prompts.txt
  python3 -c '
import json, sys
for line in open("prompts.txt"): print(json.dumps({"prompt": line.rstrip("\n")}))' > prompts.jsonl
  GEN="meg-generate -q --load $model --prompts prompts.jsonl --max-tokens 32"
  $GEN --device cpu --batch 1 -o cpu.jsonl
  $GEN --device cuda --precision fp32 --batch 4 -o fp32.jsonl
  $GEN --device cuda --precision bf16 --batch 4 -o bf16.jsonl
  python3 - cpu.jsonl fp32.jsonl bf16.jsonl <<'PY' || fail "$model: GPU completions differ from the CPU's"
import json, sys
cpu, fp32, bf16 = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(cpu) == len(fp32) == len(bf16) == 6
for c, f in zip(cpu, fp32):
    assert c["completion_ids"] == f["completion_ids"], (c, f)
# bf16 rounds differently: the first tokens agree for most prompts.
agree = sum(c["completion_ids"][:4] == b["completion_ids"][:4] for c, b in zip(cpu, bf16))
assert agree >= 4, [(c["completion_ids"], b["completion_ids"]) for c, b in zip(cpu, bf16)]
PY
  for task in "lambada lambada" "hellaswag multiple-choice" "wikitext perplexity"; do
    set -- $task
    for device in cpu cuda; do
      meg-eval -q --device $device --precision fp32 --load $model --task $E/$1.jsonl --task-type $2 --batch 3 --json \
        --per-example $device.per.jsonl > $device.json
    done
    python3 - cpu.per.jsonl cuda.per.jsonl <<'PY' || fail "$model $1: GPU log-likelihoods differ from the CPU's"
import json, sys
cpu, gpu = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(cpu) == len(gpu) > 0
for c, g in zip(cpu, gpu):
    assert abs(c["loglikelihood"] - g["loglikelihood"]) < 1e-4 * max(1.0, abs(c["loglikelihood"])), (c, g)
    assert c["is_greedy"] == g["is_greedy"], (c, g)
PY
  done
done
echo "meg-generate and meg-eval on the GPU: all tests passed"
