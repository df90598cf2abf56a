# meg-pretrain's defaults, resume and fine-tuning: what is required (all of it named in one line),
# the global batch's default, the vocabulary a preset takes from the tokenizer, a run continued by
# --load alone (the checkpoint's options are the defaults) repeating an uninterrupted one, the
# tokenizer kept with every checkpoint (meg-generate works after the run directory moves),
# --finetune, --pretrained-checkpoint, --no-load-optim, --no-load-rng, Megatron's scheduler flags
# and --exit-on-missing-checkpoint, --override-data, a run longer than its blend (epochs), a save
# directory of another run refused unless --overwrite, and the blend built and cached from
# --data-path.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
SPM=$M/fortunes_spm.model
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
meg-blend -q --seq-length 32 --samples 400 --seed 7 -o other.blend 1 $M/fortunes_spm
TRAIN="meg-pretrain -q --device cpu --model tiny --tokenizer $SPM --data run.blend --micro-batch 4 --global-batch 8
       --warmup-iters 3 --log-interval 1"
record() { python3 -c "import json, sys; print(json.load(open('$1/checkpoint.json'))['record']$2)"; }

# (1) Required options: a run without a learning rate is refused, and all that is missing is named
# in one line; --help says which are required.
expect_fail 1 "^meg-pretrain: missing: --lr$" -- meg-pretrain -q --model tiny --tokenizer $SPM --data run.blend --iters 3
expect_fail 1 "^meg-pretrain: missing: --model \(or --model-config\), --data \(or --data-path\), --iters, --lr$" -- \
  meg-pretrain -q
echo '{"lr": 0.001}' > lr.json
exits_with 0 meg-pretrain -q --model tiny --tokenizer $SPM --data run.blend --iters 1 --config lr.json
meg-pretrain --help > help.txt
for option in --model --data --iters --lr; do
  grep -E -- "^ +$option[, ].*REQUIRED" help.txt >/dev/null || fail "--help does not mark $option REQUIRED"
done
expect_fail 1 "^meg-pretrain: --data and --data-path together" -- $TRAIN --lr 1e-3 --iters 1 --data-path $M/fortunes_spm

# (2) --global-batch defaults to --micro-batch x the data-parallel size, and the log says so.
meg-pretrain --device cpu --model tiny --tokenizer $SPM --data run.blend --micro-batch 2 --lr 1e-3 --iters 1 \
  --save gb 2>gb.err
grep -q "^meg-pretrain: --global-batch 2: --micro-batch 2 x 1 data-parallel rank (the default)$" gb.err ||
  fail "the default global batch is not logged: $(cat gb.err)"
# (On 2 ranks, with a --data-path blend: rank 0 builds it, the other finds it in the cache.)
mpi 2 meg-pretrain --device cpu --model tiny --tokenizer $SPM --data-path $M/fortunes_spm --seq-length 32 \
  --micro-batch 2 --lr 1e-3 --iters 1 --save gb2 2>gb2.err
grep -q "^meg-pretrain: --global-batch 4: --micro-batch 2 x 2 data-parallel ranks (the default)$" gb2.err ||
  fail "the default global batch on 2 ranks is not logged: $(cat gb2.err)"
[ "$(record gb2/iter_0000001 "['options']['global-batch']")" = 4 ] || fail "2 ranks: global batch not 4"
[ "$(ls gb2/data-cache | wc -l)" -eq 1 ] || fail "2 ranks built $(ls gb2/data-cache)"

# (3) A preset takes the tokenizer's vocabulary (2000 pieces, not GPT-2's 50257), with a line;
# --vocab-size keeps another.
SMALL="--model gpt2-124m --num-layers 1 --hidden-size 64 --num-heads 2 --tokenizer $SPM --data run.blend --lr 1e-3
       --iters 1"
meg-pretrain --device cpu $SMALL --save v1 2>v1.err
grep -q "^meg-pretrain: --model gpt2-124m: the tokenizer's vocabulary of 2000 replaces the model's 50257" v1.err ||
  fail "no line for the preset's vocabulary: $(cat v1.err)"
[ "$(record v1/iter_0000001 "['model']['vocab-size']")" = 2000 ] || fail "gpt2-124m did not take the tokenizer's vocabulary"
meg-pretrain -q --device cpu $SMALL --vocab-size 50257 --save v2
[ "$(record v2/iter_0000001 "['model']['vocab-size']")" = 50257 ] || fail "--vocab-size did not win"

# (4) --load DIR --save DIR alone continues a run: its losses are the uninterrupted run's. The
# checkpoint keeps the tokenizer, hard-linked from one checkpoint to the next.
$TRAIN --lr 3e-3 --iters 20 --metrics straight.jsonl
$TRAIN --lr 3e-3 --iters 20 --save r --exit-interval 10
meg-pretrain -q --device cpu --load r --save r
losses straight.jsonl > straight.loss
losses r/metrics.jsonl > r.loss
same_file straight.loss r.loss
[ "$(record r/iter_0000020 "['options']['lr']")" = 0.003 ] || fail "the resumed run did not keep --lr"
[ "$(record r/iter_0000020 "['tokenizer']['tokenizer']")" = tokenizer.model ] || fail "no tokenizer in the record"
same_file $SPM r/iter_0000020/tokenizer.model
[ "$(stat -c %i r/iter_0000010/tokenizer.model)" = "$(stat -c %i r/iter_0000020/tokenizer.model)" ] ||
  fail "the checkpoints of one run do not share the tokenizer's copy"
# An option given on resume overrides the checkpoint's, with a warning.
meg-pretrain --device cpu --load r --iters 21 --lr 1e-3 --metrics over.jsonl 2>over.err
grep -q "warning: .*--lr was 0.003 and is now 0.001" over.err || fail "no warning for the changed --lr: $(cat over.err)"
# Megatron's scheduler flags: --use-checkpoint-opt-param-scheduler keeps the checkpoint's --lr
# over the given one (logged; the step is the one of no --lr given), --override-opt-param-scheduler
# takes the given one without the warning; not both. --exit-on-missing-checkpoint refuses a --load
# with no checkpoint rather than start afresh.
lr_of() { grep -o '"lr":[^,]*' "$1" | tail -1; }
meg-pretrain --device cpu --load r --iters 21 --metrics plain.jsonl 2>/dev/null
meg-pretrain --device cpu --load r --iters 21 --lr 1e-3 --use-checkpoint-opt-param-scheduler --metrics keep.jsonl \
  2>keep.err
grep -q "use-checkpoint-opt-param-scheduler: --lr is the checkpoint's 0.003, not 0.001$" keep.err ||
  fail "no line for the replaced --lr: $(cat keep.err)"
! grep -q -- "--lr was" keep.err || fail "a warning for the checkpoint's own --lr: $(cat keep.err)"
[ "$(lr_of keep.jsonl)" = "$(lr_of plain.jsonl)" ] && [ "$(lr_of keep.jsonl)" != "$(lr_of over.jsonl)" ] ||
  fail "--use-checkpoint-opt-param-scheduler: lr $(lr_of keep.jsonl), expected $(lr_of plain.jsonl)"
meg-pretrain --device cpu --load r --iters 21 --lr 1e-3 --override-opt-param-scheduler --metrics quiet.jsonl \
  2>quiet.err
! grep -q -- "--lr was" quiet.err || fail "--override-opt-param-scheduler still warns: $(cat quiet.err)"
[ "$(lr_of quiet.jsonl)" = "$(lr_of over.jsonl)" ] || fail "--override-opt-param-scheduler: lr $(lr_of quiet.jsonl)"
expect_fail 1 "^meg-pretrain: --use-checkpoint-opt-param-scheduler and --override-opt-param-scheduler together" -- \
  meg-pretrain --device cpu --load r --iters 21 --use-checkpoint-opt-param-scheduler --override-opt-param-scheduler
expect_fail 1 "^meg-pretrain: --load fresh: no checkpoint there, and --exit-on-missing-checkpoint is given$" -- \
  $TRAIN --lr 1e-3 --iters 2 --load fresh --save fresh --exit-on-missing-checkpoint
no_file fresh
# A --tokenizer other than the checkpoint's is warned about; the same file elsewhere is not.
cp $SPM same.model
meg-pretrain --device cpu --load r --iters 21 --tokenizer same.model --metrics t1.jsonl 2>t1.err
! grep -q "not the tokenizer the checkpoint keeps" t1.err || fail "the same tokenizer warned about: $(cat t1.err)"
meg-tokenize -q --train --vocab-size 2000 --model-type bpe -o other.model $M/fortunes_fixture.jsonl
meg-pretrain --device cpu --load r --iters 21 --tokenizer other.model --metrics t2.jsonl 2>t2.err
grep -q "warning: .*--tokenizer other.model is not the tokenizer the checkpoint keeps: the run will not repeat" t2.err ||
  fail "no warning for another tokenizer: $(cat t2.err)"
# The run directory moves; meg-generate and a resumed run find the tokenizer in it.
mv r moved
mkdir elsewhere
(cd elsewhere && meg-generate -q --device cpu --load ../moved --prompt "The" --max-tokens 4 >/dev/null) ||
  fail "meg-generate on the moved run directory"
meg-pretrain -q --device cpu --load moved --save moved --iters 22 2>/dev/null
same_file $SPM moved/iter_0000022/tokenizer.model

# (5) --finetune: the weights only, at iteration 0 with a fresh optimizer, on any data. Its first
# loss is a trained model's, below a fresh model's.
${TRAIN/run.blend/other.blend} --lr 1e-3 --iters 4 --metrics fresh.jsonl
meg-pretrain -q --device cpu --load moved --finetune --data other.blend --global-batch 8 --micro-batch 4 --lr 1e-3 \
  --iters 3 --log-interval 1 --save ft
python3 - ft/iter_0000003/checkpoint.json <<'PY' || fail "the fine-tune's record: $(cat ft/iter_0000003/checkpoint.json)"
import json, sys
r = json.load(open(sys.argv[1]))["record"]
assert (r["iteration"], r["optimizer_step"], r["consumed_samples"]) == (3, 3, 24), r
assert r["options"]["data"].endswith("other.blend") and r["tokenizer"]["tokenizer"] == "tokenizer.model", r
PY
awk -v a="$(losses ft/metrics.jsonl | head -1)" -v b="$(losses fresh.jsonl | head -1)" 'BEGIN { exit !(a < b - 0.5) }' ||
  fail "the fine-tune did not start from the trained weights"
# (6) Saving there again (a second fine-tune) is refused, naming the directory and what it holds,
# unless --overwrite.
FT="meg-pretrain -q --device cpu --load moved --finetune --data other.blend --lr 1e-3 --iters 3 --save ft"
expect_fail 1 "^meg-pretrain: --save ft: holds the checkpoints of another run \(iter_0000003\); continue it with --load ft, or give --overwrite" -- $FT
exits_with 0 $FT --overwrite
# Fine-tuning a checkpoint into its own directory would replace what it starts from.
expect_fail 1 "^meg-pretrain: --finetune with --load ft and --save ft: the fine-tune would replace" -- \
  meg-pretrain -q --device cpu --load ft --save ft --finetune
# --pretrained-checkpoint: the first launch fine-tunes from it, the next resumes --load.
PT="meg-pretrain -q --device cpu --load pt --save pt --pretrained-checkpoint moved"
$PT --data other.blend --lr 1e-3 --iters 4 --exit-interval 2
[ "$(record pt/iter_0000002 "['optimizer_step']")" = 2 ] || fail "--pretrained-checkpoint did not fine-tune"
$PT
[ "$(cat pt/latest)" = iter_0000004 ] && [ "$(record pt/iter_0000004 "['optimizer_step']")" = 4 ] ||
  fail "the second launch did not resume the fine-tune"

# (7) --no-load-optim: the iteration and data position go on, the AdamW moments and step restart.
# --no-load-rng: the seed is --seed's, not the checkpoint's.
meg-pretrain -q --device cpu --load moved --iters 24 --no-load-optim --save nlo 2>/dev/null
python3 - nlo/iter_0000024/checkpoint.json <<'PY' || fail "--no-load-optim: $(cat nlo/iter_0000024/checkpoint.json)"
import json, sys
r = json.load(open(sys.argv[1]))["record"]
assert (r["iteration"], r["optimizer_step"], r["consumed_samples"]) == (24, 2, 192), r
PY
$TRAIN --lr 1e-3 --iters 4 --seed 5 --save seeded
meg-pretrain -q --device cpu --load seeded --iters 5 --save seeded 2>/dev/null
[ "$(record seeded/iter_0000005 "['seed']")" = 5 ] || fail "the resumed run did not keep the seed"
meg-pretrain -q --device cpu --load seeded --iters 6 --no-load-rng --save seeded 2>/dev/null
[ "$(record seeded/iter_0000006 "['seed']")" = 1234 ] || fail "--no-load-rng kept the checkpoint's seed"

# (8) Another blend: refused, unless --override-data, which continues at the consumed samples.
exits_with 1 meg-pretrain -q --device cpu --load moved --iters 23 --data other.blend
stderr_matches "checkpoint.json: the checkpoint was trained on a blend with fingerprint .*other.blend .*--override-data"
meg-pretrain --device cpu --load moved --iters 23 --data other.blend --override-data --save od 2>od.err
grep -q "^meg-pretrain: --override-data: the run continues on other.blend .* at sample 176 of its 400 train samples$" od.err ||
  fail "no line for --override-data: $(cat od.err)"

# (9) A run longer than its blend reads it again: the sample index wraps (with a line). At --lr 0
# the weights stay, so the steps of the second epoch repeat the first's losses.
meg-blend -q --seq-length 32 --samples 16 --valid-samples 0 -o short.blend 1 $M/fortunes_spm
meg-pretrain --device cpu --model tiny --tokenizer $SPM --data short.blend --micro-batch 4 --global-batch 8 --lr 0 \
  --iters 4 --log-interval 1 --metrics wrap.jsonl 2>wrap.err
grep -q "short.blend: 16 train samples, and the run reads 32 to --iters 4: the sample index wraps (2.00 epochs" wrap.err ||
  fail "no line for the epochs: $(cat wrap.err)"
losses wrap.jsonl > wrap.loss
[ "$(sed -n 1,2p wrap.loss)" = "$(sed -n 3,4p wrap.loss)" ] || fail "the second epoch is not the first: $(cat wrap.loss)"

# (10) --data-path builds the blend (sized for --iters x the global batch, and the evaluations)
# and caches it in SAVE/data-cache; a second run with the same inputs reuses it, and --load alone
# continues on it exactly.
ln -s $M/fortunes_spm.bin $M/fortunes_spm.idx .
DP="meg-pretrain --device cpu --model tiny --tokenizer $SPM --micro-batch 4 --global-batch 8 --lr 3e-3 --log-interval 1
    --eval-interval 5 --eval-iters 2 --seq-length 32"
$DP --data-path "0.7 fortunes_spm 0.3 $M/fortunes_spm" --split 969,30,1 --iters 10 --metrics dstraight.jsonl \
  --data-cache-path cache 2>d1.err
grep -q "^meg-pretrain: built cache/[0-9a-f]\{16\}.blend from --data-path: 80 train, 9 valid samples of 32+1 tokens from 2 inputs$" d1.err ||
  fail "no blend built: $(cat d1.err)"
$DP --data-path 0.7 fortunes_spm 0.3 $M/fortunes_spm --iters 10 --save dp --exit-interval 5 --data-cache-path cache \
  2>d2.err
grep -q "^meg-pretrain: reusing cache/[0-9a-f]\{16\}.blend from --data-path" d2.err || fail "the blend was not reused: $(cat d2.err)"
(cd elsewhere && meg-pretrain -q --device cpu --load ../dp --save ../dp)
losses dstraight.jsonl > dstraight.loss
losses dp/metrics.jsonl > dp.loss
same_file dstraight.loss dp.loss
[ "$(ls cache)" = "$(basename "$(record dp/iter_0000010 "['options']['data']")")" ] || fail "the cache holds $(ls cache)"
# Without a cache directory it goes beside the checkpoints.
$DP --data-path fortunes_spm --iters 2 --save dps
ls dps/data-cache/*.blend >/dev/null || fail "no blend in dps/data-cache"
expect_fail 1 "^meg-pretrain: --data-path: the blend it builds is kept in --data-cache-path DIR or --save DIR" -- \
  $DP -q --data-path fortunes_spm --iters 2
echo "meg-pretrain resume and fine-tuning: all tests passed"
