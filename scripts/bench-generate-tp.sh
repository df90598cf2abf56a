#!/usr/bin/env bash
# meg-generate split over GPUs (mpirun -np N meg-generate --tp N) on a CUDA machine with several:
# tokens/s of whole runs of meg-generate, bf16, for a GPT-2 124M-shaped model with GPT-2's
# vocabulary of 50,257 (one training step on the fortunes corpus: what matters here is each
# step's work, not the text), at batch 1 and 32, greedy and sampled (temperature 0.8 with top-k
# 50, with top-p 0.95, and with top-p and a repetition penalty of 1.2), on one GPU and split over 2
# (and 4 where there are 4). Every run prompts with the first 8 words of 32 fortunes (at batch 32
# each 8 times, so that a run is 8 batches and start-up weighs little) and generates 192 tokens a
# prompt, unless a sequence ends first. A split model's choice is its members' work: greedy and
# top-k choices from candidates each member takes from its shard of the vocabulary (gathered, K a
# row), draws from the whole logits gathered (infer/cuda_inference_model.hpp). The split costs
# two sums over the GPUs a layer, through PeerSums (parallel/peer_sums.hpp) where the GPUs share
# memory, and the table times them against NCCL's all-reduce (MEG_PEER_SUMS=0); a model this
# small runs fastest on one GPU, and the table shows what the split costs a step.
#   scripts/bench-generate-tp.sh BUILD_DIR
# GENERATE=path/to/meg-generate times another build's meg-generate on the same checkpoint;
# CHOICES and BATCHES (space-separated) keep to some of the rows, e.g. CHOICES=greedy BATCHES=32.
# A markdown table on stdout; the checkpoint and results under OUT_DIR (default .bench/generate-tp).
set -uo pipefail
build=${1:-build}
out=${OUT_DIR:-.bench/generate-tp}
generate=${GENERATE:-$build/bin/meg-generate}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
gpt2=tests/data/gpt2

if [ ! -d "$out/model" ]; then
  "$build/bin/meg-blend" -q --seq-length 256 --samples 64 -o "$out/fortunes.blend" 1 tests/data/megatron/fortunes_gpt2 &&
    "$build/bin/meg-pretrain" -q --device cuda --model gpt2-124m --data "$out/fortunes.blend" \
      --tokenizer "$gpt2/vocab.json" --merges "$gpt2/merges.txt" --micro-batch 1 --global-batch 1 --lr 1e-4 \
      --iters 1 --save "$out/model" || exit 1
fi
python3 - "$out" <<'PY'
import json, sys
with open("tests/data/megatron/fortunes_fixture.jsonl") as f:
    prompts = [json.dumps({"prompt": " ".join(json.loads(line)["text"].split()[:8])}) for line, _ in zip(f, range(32))]
for batch, copies in ((1, 1), (32, 8)):
    with open(f"{sys.argv[1]}/prompts-{batch}.jsonl", "w") as out:
        out.write("".join(p + "\n" for _ in range(copies) for p in prompts))
PY

printf '| choice | batch | GPUs | sums | tokens/s | of one GPU |\n|---|---|---|---|---|---|\n'
declare -A one  # tokens/s on one GPU, by choice and batch
for choice in ${CHOICES:-greedy top-k top-p top-p-penalty}; do
  case $choice in
    greedy) sampling=() ;;
    top-k) sampling=(--temperature 0.8 --top-k 50) ;;
    top-p) sampling=(--temperature 0.8 --top-p 0.95) ;;
    top-p-penalty) sampling=(--temperature 0.8 --top-p 0.95 --repetition-penalty 1.2) ;;
    *) echo "CHOICES: unknown choice $choice" >&2; exit 2 ;;
  esac
  for batch in ${BATCHES:-1 32}; do
    [ -f "$out/prompts-$batch.jsonl" ] || { echo "BATCHES: 1 or 32, not $batch" >&2; exit 2; }
    for np in 1 2 4; do
      [ "$np" -gt "$gpus" ] && continue
      sums=(-)
      [ "$np" -gt 1 ] && sums=(nccl peer)
      for how in "${sums[@]}"; do
        name=$choice-$batch-$np-$how
        MEG_PEER_SUMS=$([ "$how" = nccl ] && echo 0 || echo 1) mpirun "${root[@]}" -np "$np" -x NCCL_NVLS_ENABLE \
          -x MEG_PEER_SUMS "$generate" --tp "$np" --load "$out/model" --prompts "$out/prompts-$batch.jsonl" \
          -o "$out/$name.jsonl" --batch "$batch" --max-tokens 192 "${sampling[@]}" 2>"$out/$name.log" ||
          { echo "failed: $name (see $out/$name.log)" >&2; exit 1; }
        rate=$(sed -n 's/.* \([0-9.]*\) tokens\/s$/\1/p' "$out/$name.log" | tail -n 1)
        [ "$np" = 1 ] && one[$choice-$batch]=$rate
        printf '| %s | %s | %s | %s | %s | %s |\n' "$choice" "$batch" "$np" "$how" "$rate" \
          "$(python3 -c "print(f'{$rate / ${one[$choice-$batch]}:.2f}')")"
      done
    done
  done
done
