# The command-line layer of the tools: each Megatron-LM option name gives the settings that meg's
# own name gives (the settings line meg-pretrain prints at start), in one process and under
# mpirun, and in the other tools that share the option; Megatron's conversions are refused where
# they do not fit; an unknown option or settings-file key is refused with the nearest name; a null
# in a settings file is an option not given, so a checkpoint's recorded options train the same run
# again; --version of every tool names the commit and the build; a layout of several ranks
# started without mpirun says how to start it.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
G=$MEG_TEST_DATA/gpt2
SPM=$M/fortunes_spm.model
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
BASE="meg-pretrain --device cpu --data run.blend"
PRETRAIN="$BASE --lr 1e-3"
TINY="--model tiny --tokenizer $SPM --iters 2"

# settings [mpi N] ARGS...: the settings line (options, model, data, layout) of a meg-pretrain run
# with ARGS, which must succeed.
settings() {
  local launch=()
  if [ "$1" = mpi ]; then launch=(mpi "$2"); shift 2; fi
  local rc=0 lr=(--lr 1e-3)  # a run needs a learning rate; the ones that set it say so
  case " $* " in *" --lr "*) lr=() ;; esac
  "${launch[@]}" $BASE "${lr[@]}" "$@" >/dev/null 2>"$WORK/.settings" || rc=$?
  [ "$rc" -eq 0 ] || fail "'$*' exited $rc: $(cat "$WORK/.settings")"
  sed -n 's/^meg-pretrain: settings //p' "$WORK/.settings"
}

# same_settings [mpi N] "MEGATRON OPTIONS" "MEG OPTIONS": both runs print the same settings.
same_settings() {
  local launch=()
  if [ "$1" = mpi ]; then launch=(mpi "$2"); shift 2; fi
  local a b
  a=$(settings "${launch[@]}" $1)
  b=$(settings "${launch[@]}" $2)
  [ -n "$a" ] || fail "no settings line for '$1'"
  [ "$a" = "$b" ] || fail "'$1' and '$2' give different settings:
$a
$b"
}

# same_refusal PATTERN "MEGATRON COMMAND" "MEG COMMAND": both exit 1 with the same one line, which
# matches PATTERN.
same_refusal() {
  expect_fail 1 "$1" -- $2
  cp "$WORK/.err" "$WORK/.err.megatron"
  expect_fail 1 "$1" -- $3
  same_file "$WORK/.err.megatron" "$WORK/.err"
}

# (1) Megatron-LM's names, one process.
same_settings "--model tiny --tokenizer $SPM --train-iters 2" "$TINY"
same_settings "$TINY --micro-batch-size 2 --global-batch-size 4" "$TINY --micro-batch 2 --global-batch 4"
same_settings "$TINY --num-attention-heads 2" "$TINY --num-heads 2"
same_settings "$TINY --lr 1e-3 --lr-decay-style linear --lr-warmup-iters 1" \
  "$TINY --lr 1e-3 --lr-decay linear --warmup-iters 1"
same_settings "--model tiny --iters 2 --tokenizer-model $SPM" "$TINY"
same_settings "--model tiny --iters 2 --vocab-file $G/vocab.json --merge-file $G/merges.txt" \
  "--model tiny --iters 2 --tokenizer $G/vocab.json --merges $G/merges.txt"
same_settings "$TINY --init-method-std 0.01" "$TINY --init-std 0.01"
same_settings "$TINY --exit-duration-in-mins 5" "$TINY --exit-after-minutes 5"
LLAMA="--model tiny-llama --tokenizer $SPM --iters 2"
same_settings "$LLAMA --group-query-attention --num-query-groups 4" "$LLAMA --num-kv-heads 4"
same_settings "$LLAMA --group-query-attention" "$LLAMA --num-kv-heads 1"  # Megatron's default: 1 group
# --init-std in the options and in the model; --max-position-embeddings checked with RoPE (no rows).
[ "$(settings $TINY --init-std 0.01 | grep -o '"init-std":0.01,' | wc -l)" -eq 2 ] ||
  fail "--init-std did not reach the model: $(cat "$WORK/.settings")"
settings $LLAMA --max-position-embeddings 64 >llama.settings
grep -q '"max-position-embeddings":64,' llama.settings || fail "--max-position-embeddings: $(cat llama.settings)"
# The layout, the schedule and the precision: refused alike in one process.
same_refusal "= 2 processes, but the job has 1: start it with mpirun -np 2$" \
  "$PRETRAIN $TINY --tensor-model-parallel-size 2" "$PRETRAIN $TINY --tp 2"
same_refusal "pp 2 .* start it with mpirun -np 2$" \
  "$PRETRAIN $TINY --pipeline-model-parallel-size 2" "$PRETRAIN $TINY --pp 2"
same_refusal "cp 2 .* start it with mpirun -np 2$" \
  "$PRETRAIN $TINY --context-parallel-size 2" "$PRETRAIN $TINY --cp 2"
same_refusal "ep 2 .* start it with mpirun -np 2$" \
  "$PRETRAIN $TINY --expert-model-parallel-size 2" "$PRETRAIN $TINY --ep 2"
for name in --virtual-pipeline-model-parallel-size --num-virtual-stages-per-pipeline-rank; do
  same_refusal "--virtual-stages needs --pp above 1" "$PRETRAIN $TINY $name 2" "$PRETRAIN $TINY --virtual-stages 2"
done
same_refusal "--recompute selective: " "$PRETRAIN $TINY --recompute-granularity selective" \
  "$PRETRAIN $TINY --recompute selective"
same_refusal "--precision bf16: the CPU" "$PRETRAIN $TINY --bf16" "$PRETRAIN $TINY --precision bf16"
same_refusal "--precision fp16: the CPU" "$PRETRAIN $TINY --fp16" "$PRETRAIN $TINY --precision fp16"
expect_fail 1 "start it with mpirun -np 4$" -- $PRETRAIN $TINY --tp 2 --pp 2
expect_fail 1 "x dp 3 = 3 processes, but the job has 1: start it with mpirun -np 3$" -- $PRETRAIN $TINY --dp 3

# Every Megatron name the man page lists is an option of meg-pretrain.
man_page=$MEG_TEST_DATA/../../man/meg-pretrain.1
meg-pretrain --help >help.txt
names=$(sed -n '/^\.SH MEGATRON-LM OPTION NAMES/,/^\.TE/p' "$man_page" |
  sed -n 's/\\-/-/g; s/^\(--[a-z0-9-]*\)\t.*/\1/p')
[ "$(echo "$names" | wc -l)" -ge 25 ] || fail "the man page's table lists too few names: $names"
for name in $names; do
  grep -Eq -- "(^|[ ,])$name([ ,=]|$)" help.txt || fail "meg-pretrain --help lacks $name (man page table)"
done

# (2) Megatron's names under mpirun: the layout and the virtual stages they convert to.
same_settings mpi 2 "$TINY --tensor-model-parallel-size 2" "$TINY --tp 2"
VPP="$TINY --num-layers 4 --micro-batch 1 --global-batch 2"
for megatron in "--num-layers-per-virtual-pipeline-stage 1" "--virtual-pipeline-model-parallel-size 2"; do
  same_settings mpi 2 "$VPP --pipeline-model-parallel-size 2 $megatron" "$VPP --pp 2 --virtual-stages 2"
done

# (3) Megatron's conversions where they do not fit, and the precision flags that disagree.
expect_fail 1 "--num-query-groups requires --group-query-attention" -- $PRETRAIN $LLAMA --num-query-groups 2
expect_fail 1 "--num-kv-heads excludes --group-query-attention" -- \
  $PRETRAIN $LLAMA --group-query-attention --num-kv-heads 2
expect_fail 1 "--num-layers-per-virtual-pipeline-stage requires --num-layers" -- \
  $PRETRAIN $TINY --pp 2 --num-layers-per-virtual-pipeline-stage 1
expect_fail 1 "excludes --virtual-stages|--virtual-stages excludes" -- \
  $PRETRAIN $TINY --num-layers 4 --pp 2 --virtual-stages 2 --num-layers-per-virtual-pipeline-stage 1
expect_fail 1 "--num-layers-per-virtual-pipeline-stage 3: the 2 blocks of each of the --pp 2 stages do not divide" -- \
  $PRETRAIN $TINY --num-layers 4 --pp 2 --num-layers-per-virtual-pipeline-stage 3
expect_fail 1 "--num-layers-per-virtual-pipeline-stage 1: --num-layers 3 does not divide over --pp 2 stages" -- \
  $PRETRAIN $TINY --num-layers 3 --pp 2 --num-layers-per-virtual-pipeline-stage 1
expect_fail 1 "--bf16: conflicts with --fp16 \(try --help\)$" -- $PRETRAIN $TINY --bf16 --fp16
expect_fail 1 "--bf16: conflicts with --precision fp32" -- $PRETRAIN $TINY --precision fp32 --bf16
expect_fail 1 "--max-position-embeddings 16 is below the sequence length 32" -- \
  $PRETRAIN $TINY --max-position-embeddings 16
expect_fail 1 "--max-position-embeddings 64: learned position embeddings have one row per position" -- \
  $PRETRAIN $TINY --max-position-embeddings 64

# (4) Unknown options and settings: one line with the nearest name, in every tool.
expect_fail 1 "unknown option --trian-iters; did you mean --train-iters\? \(try --help\)$" -- \
  $PRETRAIN $TINY --trian-iters 5
expect_fail 1 "unknown option --micro-bacth; did you mean --micro-batch\?" -- $PRETRAIN $TINY --micro-bacth=2
expect_fail 1 "unknown option --tensor-parallel-size; did you mean --tensor-model-parallel-size\?" -- \
  $PRETRAIN $TINY --tensor-parallel-size 2
expect_fail 1 "meg-pretrain: unknown option --xyzzy \(try --help\)$" -- $PRETRAIN $TINY --xyzzy
expect_fail 1 "unknown option --outptu; did you mean --output\?" -- meg-index --outptu x
expect_fail 1 "unknown option --tokenizer-modle; did you mean --tokenizer-model\?" -- meg-tokenize --tokenizer-modle x
echo '{"warmup-iter": 2}' >typo.json
expect_fail 1 "typo.json: unknown setting 'warmup-iter'; did you mean 'warmup-iters'\? \(try --help\)$" -- \
  $PRETRAIN $TINY --config typo.json
echo '{"sed": null}' >typo.json  # a null is checked as a key too
expect_fail 1 "typo.json: unknown setting 'sed'; did you mean 'seed'\?" -- $PRETRAIN $TINY --config typo.json
echo '{"tensor-model-paralel-size": 1}' >typo.json
expect_fail 1 "unknown setting 'tensor-model-paralel-size'; did you mean 'tensor-model-parallel-size'\?" -- \
  $PRETRAIN $TINY --config typo.json

# (5) Settings files: Megatron's names are keys too, and a null is an option not given.
echo '{"train-iters": 2, "micro-batch-size": 2}' >megatron.json
same_settings "--model tiny --tokenizer $SPM --config megatron.json" "$TINY --micro-batch 2"
echo '{"dp": null, "seed": null, "hidden-dropout": null, "num-layers": null, "iters": 2}' >nulls.json
same_settings "--model tiny --tokenizer $SPM --config nulls.json" "$TINY"

# (6) A checkpoint's recorded options, fed back as they are through --config, train the same run:
# the same losses, the same weights, the same record (but for --save, given on the command line).
TRAIN="$BASE --model tiny --tokenizer $SPM --num-layers 3 --micro-batch 2 --global-batch 4 --lr 3e-3
       --warmup-iters 1 --lr-decay-iters 3 --lr-decay linear --hidden-dropout 0.1 --seed 7 --iters 4
       --log-interval 1"
$TRAIN -q --save a
python3 - a/iter_0000004/checkpoint.json >options.json <<'PY'
import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["record"]["options"]))
PY
grep -q '"dp": null' options.json || fail "the recorded options hold no null to skip: $(cat options.json)"
meg-pretrain -q --config options.json --save b
losses a/metrics.jsonl >a.loss
losses b/metrics.jsonl >b.loss
[ "$(wc -l <a.loss)" -eq 4 ] || fail "the first run logged $(wc -l <a.loss) losses"
same_file a.loss b.loss
same_file a/iter_0000004/model.safetensors b/iter_0000004/model.safetensors
python3 - a/iter_0000004/checkpoint.json b/iter_0000004/checkpoint.json <<'PY' || fail "the records differ"
import json, sys
a, b = (json.load(open(f))["record"] for f in sys.argv[1:])
assert a["options"].pop("save") == "a" and b["options"].pop("save") == "b"
assert a == b, (a, b)
PY

# (7) --version: the tool, the version, the commit and the build.
source_dir=$(cd "$MEG_TEST_DATA/../.." && pwd -P)
commit=unknown
top=$(git -C "$source_dir" rev-parse --show-toplevel 2>/dev/null || true)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$source_dir" ]; then
  commit=$(git -C "$source_dir" rev-parse --short HEAD)
fi
for tool in meg-tokenize meg-index meg-blend meg-pretrain meg-ckpt-convert meg-eval meg-generate meg-retro-build; do
  line=$($tool --version)
  echo "$line" | grep -Eq "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-z]+, (CUDA [0-9a-z_,]+|CPU only)\)$" ||
    fail "$tool --version: '$line'"
  [ "$(echo "$line" | sed 's/.*(commit \([^,]*\),.*/\1/')" = "$commit" ] ||
    fail "$tool --version: '$line', but the sources are at commit $commit (rebuild after a commit)"
done

# (8) The other tools take the shared options' Megatron names.
echo '{"text": "A fortune favours the bold."}' >doc.jsonl
meg-tokenize --tokenizer $SPM doc.jsonl >a.tok
meg-tokenize --tokenizer-model $SPM doc.jsonl >b.tok
same_file a.tok b.tok
GEN="meg-generate --device cpu --load a --prompt Fortune --max-tokens 4 --temperature 0"
$GEN --tokenizer $SPM >a.txt
$GEN --tokenizer-model $SPM >b.txt
same_file a.txt b.txt
same_refusal "--tp 2: meg-generate runs one process per tensor-parallel rank" \
  "$GEN --tensor-model-parallel-size 2" "$GEN --tp 2"
same_refusal "--precision bf16: " "$GEN --bf16" "$GEN --precision bf16"
same_refusal "--precision fp16: " "meg-eval --device cpu --load a --task doc.jsonl --task-type perplexity --fp16" \
  "meg-eval --device cpu --load a --task doc.jsonl --task-type perplexity --precision fp16"
meg-ckpt-convert -q --load a --save tp2 --tp 2
meg-ckpt-convert -q --load a --save tp2-megatron --tensor-model-parallel-size 2
for f in $(cd tp2 && find . -type f | sort); do same_file "tp2/$f" "tp2-megatron/$f"; done
echo "cli options: ok"
