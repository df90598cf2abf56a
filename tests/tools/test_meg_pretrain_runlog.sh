# Seeing a run: meg-pretrain's start-up block and log lines (elapsed, time left), its TensorBoard
# events read back record by record (both CRC-32C values) against the metrics, also after a resume
# and a kill -9 (and with TensorBoard's own reader where it is installed), and --plot drawing runs
# as SVG, with bad input refused in one line and no SVG.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
M=$MEG_TEST_DATA/megatron
EVENTS="python3 $HERE/tfevents.py"  # an event file's records, checked, against the metrics
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm 2>/dev/null
TRAIN="meg-pretrain --device ${MEG_TEST_DEVICE:-cpu} --model tiny --data run.blend --tokenizer $M/fortunes_spm.model \
  --micro-batch 4 --global-batch 8 --lr 3e-3 --warmup-iters 3 --log-interval 2 --eval-interval 5 --eval-iters 2"

# (1) The start-up block: the settings record, then a plain line each for the model, the layout,
# the batch arithmetic, the data, the schedule and the outputs; log lines end with the elapsed time
# and the time left. --quiet silences all of it.
$TRAIN --iters 10 --save a --tensorboard-dir a/tb 2>a.log
has() { grep -Eq -- "$1" a.log || fail "the log lacks '$1': $(cat a.log)"; }
has '^meg-pretrain: settings \{"options":\{.*"tensorboard-dir":"a/tb"'
has '^meg-pretrain: model: tiny, gpt2 family: 2 layers, hidden 64, 4 heads, ffn 256, vocab 2000 \(padded 2048\), seq 32; 0\.[0-9]+M parameters$'
has '^meg-pretrain: parallel: 1 rank: tp 1 x pp 1 x dp 1 \(cp 1, ep 1\); (cpu|cuda)'
has '^meg-pretrain: batch: micro-batch 4 x 1 data-parallel rank x 2 accumulation steps = global batch 8; 256 tokens per iteration$'
has "^meg-pretrain: data: 10 iterations: 80 samples, 2560 tokens; the run takes 20.0% of run.blend's 400 train samples, 0.08 epochs of its inputs' train documents$"
has '^meg-pretrain: learning rate: linear warmup from 0 to 0.003 over 3 iterations, then cosine decay from 0.003 to 0 at iteration 10$'
has '^meg-pretrain: output: checkpoints in a at the end; metrics in a/metrics.jsonl; TensorBoard events in a/tb$'
T='([0-9]+[smhd])+'
has "^meg-pretrain: iter 2/10 \| tokens 512 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| grad norm [0-9.]+ \| [0-9.]+ ms/iter \| [0-9]+ tokens/s( \| peak mem [0-9.]+ GiB)? \| elapsed $T \| left $T$"
has "^meg-pretrain: iter 10/10 \| .* \| elapsed $T \| left 0s$"
has '^meg-pretrain: iter 5 \| valid loss [0-9.]+ \| valid ppl [0-9.]+$'
$TRAIN -q --iters 6 2>q.log
[ ! -s q.log ] || fail "--quiet printed: $(cat q.log)"

# (2) The metrics tell train and valid records apart by "split"; the events hold the same numbers.
python3 - a/metrics.jsonl <<'PY' || fail "metrics splits: $(cat a/metrics.jsonl)"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert [(x["iteration"], x["split"]) for x in r] == [(2, "train"), (4, "train"), (5, "valid"), (6, "train"),
                                                     (8, "train"), (10, "train"), (10, "valid")], r
assert all("loss" in x for x in r if x["split"] == "train") and all("valid_loss" in x for x in r if x["split"] == "valid")
PY
[ "$(ls a/tb)" = "$(ls a/tb | grep -E '^events\.out\.tfevents\.[0-9]{10}\.[^.].*\.[0-9]+$')" ] || fail "event file name: $(ls a/tb)"
[ "$($EVENTS a/tb/events.out.tfevents.* a/metrics.jsonl)" -eq 9 ] || fail "expected 2 + 7 records"

# (3) A resumed run adds an event file that starts at its first step and matches what it logged.
$TRAIN --iters 10 --save b --save-interval 4 --exit-interval 4 --tensorboard-dir b/tb 2>/dev/null
sleep 1  # event files sort by their second of creation
$TRAIN --iters 10 --save b --load b --tensorboard-dir b/tb 2>/dev/null
[ "$(ls b/tb | wc -l)" -eq 2 ] || fail "expected two event files: $(ls b/tb)"
$EVENTS "b/tb/$(ls b/tb | head -1)" >/dev/null || fail "the first leg's event file"
[ "$($EVENTS "b/tb/$(ls b/tb | tail -1)" b/metrics.jsonl)" -eq 7 ] || fail "the resumed leg: 2 + 5 records"

# (3b) TensorBoard's own reader, where python3 has it (the CUDA machines do), sees the same scalars.
if python3 -c "import tensorboard" 2>/dev/null; then
  for run in a b; do
    python3 "$HERE/../../scripts/check-tensorboard.py" $run/tb $run/metrics.jsonl >tb.log 2>&1 ||
      fail "TensorBoard's reader on $run/tb: $(cat tb.log)"
  done
  echo "checked with TensorBoard's reader"
fi

# (4) kill -9: the event file holds whole records, one per metrics line (the kill may fall between
# the two writes).
meg-blend -q --seq-length 32 --samples 20000 -o big.blend 1 $M/fortunes_spm 2>/dev/null
meg-pretrain -q --device ${MEG_TEST_DEVICE:-cpu} --model tiny --data big.blend --tokenizer $M/fortunes_spm.model \
  --micro-batch 4 --lr 1e-3 --iters 5000 --log-interval 1 --metrics k.jsonl --tensorboard-dir ktb &
pid=$!
for _ in $(seq 200); do [ "$(cat k.jsonl 2>/dev/null | wc -l)" -ge 5 ] && break; sleep 0.05; done
kill -KILL $pid
wait $pid || true
records=$($EVENTS ktb/events.out.tfevents.*) || fail "the killed run's event file"
lines=$(wc -l < k.jsonl)
[ "$lines" -ge 5 ] && { [ "$records" -eq $((lines + 2)) ] || [ "$records" -eq $((lines + 1)) ]; } ||
  fail "$records records for $lines metrics lines"

# (5) Bad --tensorboard-dir: one line, exit 1.
touch plain
expect_fail 1 "^meg-pretrain: --tensorboard-dir plain/tb: cannot create: " -- $TRAIN -q --iters 6 --tensorboard-dir plain/tb

# (6) --plot draws runs (a --save directory, a metrics file) as SVG: well-formed XML, a polyline
# each, named in data-name and the legend, and a marker per validation record.
mkdir c && cp a/metrics.jsonl c/run.jsonl
meg-pretrain --plot loss.svg a b/metrics.jsonl c/run.jsonl
python3 - loss.svg <<'PY' || fail "the plot: $(head -c 2000 loss.svg)"
import xml.etree.ElementTree as ET, sys
S = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == S + "svg", root.tag
runs = root.findall(f"{S}g[@class='run']")
assert [g.get("data-name") for g in runs] == ["a", "b", "c/run.jsonl"], [g.get("data-name") for g in runs]
for g, valid in zip(runs, (2, 2, 2)):
    lines = g.findall(f"{S}polyline[@class='train']")
    assert len(lines) == 1 and len(lines[0].get("points").split()) == 5, g.get("data-name")
    assert len(g.findall(f"{S}circle[@class='valid']")) == valid, g.get("data-name")
colours = [g.find(f"{S}polyline").get("stroke") for g in runs]
assert len(set(colours)) == 3, colours
legend = " ".join(t.text for t in root.iter(S + "text") if t.text)
assert all(n in legend for n in ("a", "b", "c/run.jsonl", "validation loss", "iteration", "loss")), legend
PY

# Bad input: one line naming the file (and the line), exit 1, and no SVG (an old one is kept).
cp loss.svg keep.svg
expect_fail 1 "^meg-pretrain: nothere: cannot open: No such file or directory$" -- meg-pretrain --plot loss.svg a nothere
head -2 a/metrics.jsonl > bad.jsonl && echo '{"iteration": 3, "split": "train", "loss": ' >> bad.jsonl
expect_fail 1 "^meg-pretrain: bad.jsonl:3:[0-9]+: not valid JSON" -- meg-pretrain --plot loss.svg a bad.jsonl
echo '{"iteration": 3, "split": "train", "lr": 1}' > noloss.jsonl
expect_fail 1 "^meg-pretrain: noloss.jsonl:1: key 'loss' is missing$" -- meg-pretrain --plot new.svg noloss.jsonl
mkdir empty
expect_fail 1 "^meg-pretrain: empty/metrics.jsonl: cannot open" -- meg-pretrain --plot new.svg empty
expect_fail 1 "^meg-pretrain: --plot new.svg: name the runs to draw" -- meg-pretrain --plot new.svg
expect_fail 1 "^meg-pretrain: 'a': runs to draw need --plot OUT.svg$" -- meg-pretrain a
same_file loss.svg keep.svg
no_file new.svg
echo "meg-pretrain run log: all tests passed"
