#!/usr/bin/env bash
# The embedded demo (make demo): real text from Debian's fortunes packages, through every stage:
# train a SentencePiece model, tokenize, index, blend, train a tiny GPT (on the GPU when there is
# one) and save it, then score it and let it write.
#   scripts/demo.sh BIN_DIR [WORK_DIR]
set -euo pipefail
bin=$(cd "${1:?usage: demo.sh BIN_DIR [WORK_DIR]}" && pwd)
work=${2:-.demo}
export PATH="$bin:$PATH"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
cd "$work"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "corpus: every fortune one JSONL document, in two collections"
bash "$here/demo-corpus.sh" .
wc -l tech.jsonl general.jsonl

step "meg-tokenize --train: a SentencePiece BPE model of 4000 pieces"
meg-tokenize --train --vocab-size 4000 --model-type bpe -o spm.model tech.jsonl general.jsonl

step "meg-tokenize | meg-index: token streams to Megatron .bin/.idx"
for c in tech general; do
  meg-tokenize --tokenizer spm.model --append-eod "$c.jsonl" | meg-index -o "$c"
done

step "meg-index --info"
meg-index --info tech general

step "meg-blend: 30% technical, 70% general, samples of 257 tokens"
meg-blend --seq-length 256 --samples 20000 --seed 1234 --split 949,50,1 -o fortunes.blend 0.3 tech 0.7 general

step "meg-blend --dump"
meg-blend --dump fortunes.blend

step "the bar to beat: a model that knows only token frequencies"
meg-index --info --entropy tech general | grep -E "^(prefix|entropy)"

step "meg-pretrain: a small GPT (4 layers, 128 wide), about five minutes on 2 CPU cores (seconds on a GPU)"
rm -rf ckpt
meg-pretrain --model tiny --num-layers 4 --hidden-size 128 --data fortunes.blend --tokenizer spm.model --iters 400 \
  --micro-batch 8 --global-batch 16 --lr 3e-3 --min-lr 3e-4 --warmup-iters 30 --log-interval 50 \
  --eval-interval 100 --eval-iters 8 --save ckpt

step "meg-eval: its perplexity on the first 200 general fortunes (seen in training), as lm-evaluation-harness computes it"
meg-eval --load ckpt --task general --task-type perplexity --limit 200

step "meg-generate: three fortunes of its own, sampled"
printf '%s\n' "You will" "Never" "The" | meg-generate --load ckpt --max-tokens 40 --temperature 0.8 --top-p 0.95 \
  --echo --stop $'\n\n'

step "meg-pretrain --plot: the loss curves, training and validation"
meg-pretrain --plot loss.svg ckpt

echo
echo "demo: files are in $(pwd); the loss curves are in $(pwd)/loss.svg"
