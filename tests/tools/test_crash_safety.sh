# Crash safety: tools killed with kill -9 at random moments leave their final names holding a
# whole old or whole new result, or nothing, and training resumes as if never interrupted.
#   meg-pretrain saving every iteration: the metrics hold whole lines, one per iteration done; the
#     checkpoint directory holds whole checkpoints only, `latest` naming one; resumed from it, the
#     run's losses equal an uninterrupted run's bit for bit.
#   meg-ckpt-convert resharding into a directory that holds an older conversion: `latest` names
#     the old or the new checkpoint, each identical to a conversion never interrupted; exporting to
#     Hugging Face: the directory is absent or identical to an export never interrupted, and the
#     next export removes the killed ones' staging folders.
# MEG_CRASH_TRIALS kills per case (default 5, for make test's time; raise it to hunt).
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
TRIALS=${MEG_CRASH_TRIALS:-5}
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm

# timed_ms COMMAND...: runs COMMAND and prints how long it took, in milliseconds.
timed_ms() {
  local start
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1
  echo $((($(date +%s%N) - start) / 1000000))
}

# kill_at_random MAX_MS COMMAND...: starts COMMAND in the background and kill -9s it after a
# random time below MAX_MS (it may have finished by then); returns once it is gone.
kill_at_random() {
  local max_ms=$1
  shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep "$(awk -v r=$RANDOM -v m="$max_ms" 'BEGIN { printf "%.3f", r / 32768 * m / 1000 }')"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
}

# pairs METRICS: "iteration loss" of each training line, the loss as printed (all its digits).
pairs() { sed -n 's/.*"iteration":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

# no_leftovers DIR: no temporary or set-aside directory of a save is left in DIR.
no_leftovers() {
  if ls -A "$1" | grep -q '\.tmp-\|\.old-'; then fail "$1 holds leftovers of a crashed save: $(ls -A "$1")"; fi
}

# (a) meg-pretrain, saving every iteration and keeping the newest 3.
RUN="meg-pretrain -q --device cpu --model tiny --tokenizer $M/fortunes_spm.model --data run.blend --micro-batch 4
     --lr 3e-3 --warmup-iters 3 --log-interval 1 --iters 12 --save-interval 1 --keep 3"
full=$(timed_ms $RUN --save ref --metrics ref.jsonl)
pairs ref.jsonl > ref.pairs
[ "$(wc -l < ref.pairs)" -eq 12 ] || fail "the uninterrupted run logged $(wc -l < ref.pairs) steps"
for trial in $(seq "$TRIALS"); do
  rm -rf ck killed.jsonl resumed.jsonl
  mkdir ck
  kill_at_random "$full" $RUN --save ck --load ck --metrics killed.jsonl
  # The metrics: whole JSON lines, iterations 1, 2, ... with the uninterrupted run's losses.
  done_iters=0
  if [ -e killed.jsonl ]; then
    python3 - killed.jsonl <<'PY' || fail "trial $trial: killed.jsonl holds a torn line: $(tail -c 300 killed.jsonl)"
import json, sys
text = open(sys.argv[1]).read()
assert text == "" or text.endswith("\n")
assert [json.loads(line)["iteration"] for line in text.splitlines()] == list(range(1, text.count("\n") + 1))
PY
    done_iters=$(grep -c . killed.jsonl || true)
    pairs killed.jsonl | cmp -s - <(head -n "$done_iters" ref.pairs) || fail "trial $trial: losses differ"
  fi
  # The checkpoints: every iter_* is whole and none runs ahead of the metrics; `latest` names one.
  # The run resumes from that, or without `latest` (killed before the first one was written) from
  # the newest iter_*.
  saved=0
  for d in ck/iter_*; do
    [ -e "$d" ] || continue
    [ -f "$d/checkpoint.json" ] || fail "trial $trial: $d is not a whole checkpoint"
    saved=$((10#${d#ck/iter_}))
    [ "$saved" -le "$done_iters" ] || fail "trial $trial: checkpoint $saved but metrics up to $done_iters"
  done
  if [ -e ck/latest ]; then
    latest=$(cat ck/latest)
    [ -f "ck/$latest/checkpoint.json" ] || fail "trial $trial: latest names $latest, which is not whole: $(ls -A ck)"
    saved=$((10#${latest#iter_}))
  fi
  # Resumed, the run continues exactly as the uninterrupted one, and its saves clear the leftovers.
  $RUN --save ck --load ck --metrics resumed.jsonl 2>/dev/null
  pairs resumed.jsonl > resumed.pairs
  tail -n +$((saved + 1)) ref.pairs | cmp -s - resumed.pairs ||
    fail "trial $trial: resumed from $saved, the losses differ: $(paste -d' ' resumed.pairs ref.pairs | head)"
  [ "$(cat ck/latest)" = iter_0000012 ] || fail "trial $trial: the resumed run ended at $(cat ck/latest)"
  no_leftovers ck
done

# (b) meg-ckpt-convert. A checkpoint of a larger model (so that a conversion takes a while), at
# iterations 3 and 6; the conversions of each, uninterrupted, as the references.
meg-pretrain -q --device cpu --model tiny --hidden-size 256 --num-layers 4 --tokenizer $M/fortunes_spm.model \
  --data run.blend --micro-batch 4 --lr 1e-3 --iters 6 --save-interval 3 --save src
meg-ckpt-convert -q --load src/iter_0000003 --save ref3 --tp 2
full=$(timed_ms meg-ckpt-convert -q --load src/iter_0000006 --save ref6 --tp 2)
for trial in $(seq "$TRIALS"); do
  rm -rf out
  meg-ckpt-convert -q --load src/iter_0000003 --save out --tp 2
  kill_at_random "$full" meg-ckpt-convert -q --load src/iter_0000006 --save out --tp 2
  latest=$(cat out/latest)
  case $latest in iter_0000003 | iter_0000006) ;; *) fail "trial $trial: out/latest names $latest" ;; esac
  for d in out/iter_*; do
    diff -r "$d" "ref$((10#${d#out/iter_}))/${d#out/}" >/dev/null || fail "trial $trial: $d is not a whole conversion"
  done
  # Run again, an interrupted conversion completes (also one killed between its rename and
  # `latest`) and takes its leftovers away.
  if [ "$latest" != iter_0000006 ]; then
    meg-ckpt-convert -q --load src/iter_0000006 --save out --tp 2 || fail "trial $trial: the conversion run again"
    [ "$(cat out/latest)" = iter_0000006 ] || fail "trial $trial: run again, out/latest names $(cat out/latest)"
    diff -r out/iter_0000006 ref6/iter_0000006 >/dev/null || fail "trial $trial: the conversion run again differs"
    no_leftovers out
  fi
done

full=$(timed_ms meg-ckpt-convert -q --load src --to hf --save ref-hf)
for trial in $(seq "$TRIALS"); do
  rm -rf hf
  kill_at_random "$full" meg-ckpt-convert -q --load src --to hf --save hf
  [ ! -e hf ] || diff -r hf ref-hf >/dev/null || fail "trial $trial: hf holds a partial export: $(ls -l hf)"
done
# The next export takes away the staging folders that the killed ones left.
rm -rf hf
meg-ckpt-convert -q --load src --to hf --save hf
diff -r hf ref-hf >/dev/null || fail "the export after the killed ones differs"
if ls -A | grep -q '^\.hf\.tmp-'; then fail "killed exports' staging folders are left: $(ls -A | grep '^\.hf\.tmp-')"; fi
echo "crash safety: all tests passed ($TRIALS trials per case)"
