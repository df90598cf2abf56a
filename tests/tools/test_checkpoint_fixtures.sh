# Files written by an earlier meg load in this one and behave as they did there: a checkpoint of a
# small GPT trained in one process, one of a small Llama trained under mpirun with --tp 2 (a file a
# shard), and the Hugging Face exports of both (bf16), all in tests/data/checkpoints/, written by
# the build of 75e7cfe. Each must give that build's greedy completion, perplexity and, resumed for
# two more iterations, its losses, to the last bit; the exports, imported, its completions. The
# bits are those of the platform of the golden values (require_golden_platform, tests/tools/lib.sh).
#
# With MEG_FIXTURE_WRITE=1 the test writes the files instead (with the build of the commit that
# is to write them; the commit says which).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export MEG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ "${MEG_FIXTURE_WRITE:-0}" = 1 ] || require_golden_platform "checkpoint fixtures"
M=$MEG_TEST_DATA/megatron
C=$MEG_TEST_DATA/checkpoints
T="--tokenizer $M/fortunes_spm.model"
# The blend names its dataset as given, and a resumed run checks the blend's fingerprint: a name
# the same wherever the test runs.
ln -s $M/fortunes_spm.bin $M/fortunes_spm.idx .
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 fortunes_spm
TRAIN="--device cpu --data run.blend $T --micro-batch 2 --global-batch 4 --lr 3e-3 --warmup-iters 2 --log-interval 1
       --hidden-size 32 --hidden-dropout 0.1"

if [ "${MEG_FIXTURE_WRITE:-0}" = 1 ]; then
  rm -rf "$C" && mkdir -p "$C"
  meg-pretrain -q $TRAIN --model tiny --num-heads 2 --ffn-hidden-size 128 --iters 4 --save gpt
  mpi 2 meg-pretrain -q $TRAIN --model tiny-llama --num-heads 4 --num-kv-heads 2 --ffn-hidden-size 96 --iters 4 \
    --tp 2 --save llama-tp2
  for ck in gpt llama-tp2; do
    cp -r $ck/iter_0000004 "$C/$ck"
    # The record names the tokenizer by its absolute path on the writing machine: by its name here.
    sed -i "s|\"$M/fortunes_spm.model\"|\"fortunes_spm.model\"|" "$C/$ck/checkpoint.json"
    meg-ckpt-convert -q --load $ck --to hf --dtype bf16 --save "$C/$ck-hf"
  done
fi

# behaviour CHECKPOINT NAME: what CHECKPOINT does, into NAME.generate, NAME.eval and NAME.resume.
behaviour() {
  local ck=$1 name=$2
  meg-generate -q --device cpu --load $ck $T --prompt "The" --max-tokens 24 > $name.generate
  meg-eval -q --device cpu --load $ck $T --task $MEG_TEST_DATA/eval/wikitext.jsonl --task-type perplexity --json |
    python3 -c "import json, sys; r = json.load(sys.stdin); print(json.dumps({k: r[k] for k in ('metrics', 'tokens', 'documents')}))" \
    > $name.eval
  rm -rf resumed
  meg-pretrain -q $TRAIN --load $ck --save resumed --iters 6 --metrics resumed.jsonl
  python3 -c "
import json
print(json.dumps([(r['iteration'], r['loss'], r['grad_norm']) for r in map(json.loads, open('resumed.jsonl'))]))" \
    > $name.resume
  rm -rf resumed resumed.jsonl
}

for ck in gpt llama-tp2; do
  behaviour "$C/$ck" $ck
  meg-ckpt-convert -q --from hf "$C/$ck-hf" --save imported
  meg-generate -q --device cpu --load imported $T --prompt "The" --max-tokens 24 > $ck-hf.generate
  rm -rf imported
  for f in $ck.generate $ck.eval $ck.resume $ck-hf.generate; do
    if [ "${MEG_FIXTURE_WRITE:-0}" = 1 ]; then cp $f "$C/$f"; else same_file "$C/$f" $f; fi
  done
done
echo "checkpoint fixtures: load and behave as when they were written"
