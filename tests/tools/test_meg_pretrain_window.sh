# Sliding-window attention, Megatron's --window-size (L,R): a run with a window records it in its
# checkpoints and run log, trains differently from full attention, keeps it when resumed (the
# resumed run repeats an uninterrupted one), and meg-generate and meg-eval load it; a window as
# long as the sequence is full attention; bad values are refused with one line naming the option.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
SPM=$M/fortunes_spm.model
meg-blend -q --seq-length 32 --samples 200 -o run.blend 1 $M/fortunes_spm
TRAIN="meg-pretrain --device cpu --model tiny-llama --tokenizer $SPM --data run.blend --micro-batch 4 --global-batch 4
       --lr 3e-3 --warmup-iters 1 --log-interval 1"
window() { python3 -c "import json, sys; print(json.load(open('$1/checkpoint.json'))['record']['model']['window-size'])"; }

# (1) A window of 3 keys back: recorded as [3, 0], shown in the run log (a run of 8 stopped at 4).
$TRAIN --iters 8 --exit-interval 4 --window-size 3,0 --save w 2>w.err
[ "$(window w/iter_0000004)" = "[3, 0]" ] || fail "the record holds window-size $(window w/iter_0000004)"
grep -q "^meg-pretrain: model: .*seq 32, window-size 3,0;" w.err || fail "no window in the run log: $(cat w.err)"
$TRAIN -q --iters 8 --save full
[ "$(window full/iter_0000008)" = "None" ] || fail "full attention records window-size $(window full/iter_0000008)"
[ "$(losses w/metrics.jsonl | head -1)" = "$(losses full/metrics.jsonl | head -1)" ] &&
  fail "the window changes nothing: $(losses w/metrics.jsonl | head -1)"

# (2) Resumed with --load alone, the window stays, and the losses are those of one run to 8; a
# resume asking for the preset without the window is refused, naming it.
expect_fail 1 "checkpoint's model config differs from the requested one \(window-size \[3,0\] vs null\)" -- \
  $TRAIN -q --iters 8 --load w --save w
meg-pretrain -q --device cpu --load w --save w
[ "$(window w/iter_0000008)" = "[3, 0]" ] || fail "resumed: window-size $(window w/iter_0000008)"
$TRAIN -q --iters 8 --window-size 3 --save straight
[ "$(losses w/metrics.jsonl)" = "$(losses straight/metrics.jsonl)" ] || fail "the resumed run differs"

# (3) A window covering the 32 positions (31 keys back, or more) is full attention, bit for bit.
$TRAIN -q --iters 8 --window-size 31,0 --save covering
[ "$(losses covering/metrics.jsonl)" = "$(losses full/metrics.jsonl)" ] || fail "window 31 differs from full"

# (4) meg-generate and meg-eval take the window from the checkpoint.
meg-generate -q --device cpu --load w --prompt "The" --max-tokens 20 > gen.txt || fail "meg-generate"
meg-eval -q --device cpu --load w --task $MEG_TEST_DATA/eval/text.jsonl --task-type perplexity --json > eval.json ||
  fail "meg-eval"
python3 -c "import json; assert json.load(open('eval.json'))['metrics']['word_perplexity'] > 1" ||
  fail "meg-eval: $(cat eval.json)"

# (5) Bad values, one line naming the option.
for bad in -2 8,8 "(3,1)" wide 3,x; do
  expect_fail 1 "^meg-pretrain: --window-size" -- $TRAIN -q --iters 1 --window-size "$bad" --save bad
done
no_file bad
