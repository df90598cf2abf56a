#!/usr/bin/env bash
# Data-preparation benchmarks (make bench): meg-tokenize, meg-index and meg-blend on 200+ MB of real
# text (scripts/bench-corpus.sh builds it under .bench/ when missing). Prints a markdown table of
# benchmark | measured | reference | ratio, and writes it to .bench/results.md.
#   scripts/bench.sh BIN_DIR
# Each figure is the median of BENCH_RUNS (3) timed runs after one warm-up run; a run that other
# processes disturbed (the machine may be shared) is repeated, up to 3 x BENCH_RUNS runs. Environment:
#   BENCH_RUNS=3        timed runs per row
#   BENCH_WORKERS="1 2" worker counts for meg-tokenize
#   BENCH_TRAIN=1       0 skips training (and the rows of) a 32k SentencePiece model on a slice
#   BENCH_SAMPLES=10000000  meg-blend samples
#   BENCH_DIR=.bench    where the corpus, streams and datasets go
#
# Definitions:
#   meg-tokenize MB/s: UTF-8 bytes of the documents' text (what a tokenizer encodes, the same
#     measure as scripts/bench-hf.py) per second of the whole run: reading and parsing the JSONL,
#     tokenizing, writing the token stream (to /dev/null). tokens/s counts the end-of-document
#     tokens too (--append-eod). The reference is Hugging Face tokenizers on one core of
#     dictionary text (GPT-2 byte-level BPE 2.3 MB/s; SentencePiece BPE 2k 7.0 MB/s), times the
#     number of workers. The bar: 2x the reference per core, aiming at 10 MB/s per core.
#   meg-index MB/s: bytes of the GPT-2 token stream of the whole corpus per second of
#     `cat stream | meg-index -o PREFIX` (writing and syncing PREFIX.bin and .idx); the reference
#     is `cat stream | cat > FILE` on the same file system, and the same followed by sync. The
#     bar: at least half cat's rate.
#   meg-blend: seconds to build the train/valid/test indices of a blend of the corpus (GPT-2,
#     weight 0.9) and the 605-document Megatron fortunes set (weight 0.1, so it repeats for
#     thousands of epochs) at --seq-length 1024.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=$(cd "${1:?usage: bench.sh BIN_DIR}" && pwd)
work=${BENCH_DIR:-$root/.bench}
runs=${BENCH_RUNS:-3}
workers_list=${BENCH_WORKERS:-1 2}
train=${BENCH_TRAIN:-1}
samples=${BENCH_SAMPLES:-10000000}
export PATH="$bin:$PATH"
export LC_ALL=C

for t in meg-tokenize meg-index meg-blend; do
  [ -x "$bin/$t" ] || { echo "bench: $bin/$t missing (build first: make)" >&2; exit 1; }
done
gpt2_vocab=$root/tests/data/gpt2/vocab.json
gpt2_merges=$root/tests/data/gpt2/merges.txt
spm_model=$root/tests/data/megatron/fortunes_spm.model
fortunes_gpt2=$root/tests/data/megatron/fortunes_gpt2
for f in "$gpt2_vocab" "$gpt2_merges" "$spm_model" "$fortunes_gpt2.bin" "$fortunes_gpt2.idx"; do
  [ -f "$f" ] || { echo "bench: $f missing" >&2; exit 1; }
done

mkdir -p "$work"
work=$(cd "$work" && pwd)
corpus=$work/corpus.jsonl
[ -s "$corpus" ] || bash "$here/bench-corpus.sh" "$work"   # a corpus already there is used as it is

log() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
# median SECONDS...: the middle value (the lower middle for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# CPU seconds the whole machine spent busy (steal included: a VM's neighbours count), and those of
# this shell's finished children; their difference over a run is what other processes took.
machine_cpu() { awk '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100; exit }' /proc/stat; }
children_cpu() {  # sets $cpu_now; `times` must run in this shell, not in a $(...) subshell
  times > "$work/.times"
  cpu_now=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
                           printf "%.2f", t }' "$work/.times")
}
# timed CMD...: runs CMD once to warm up (unless warmup=0), then until $runs runs were undisturbed
# (at most 3 x $runs runs); prints the median wall time in seconds of the undisturbed runs. A run
# is disturbed when other processes kept more than a tenth of a CPU busy meanwhile (the machine
# may be shared), judged for runs of a second or more (/proc/stat counts hundredths of a second).
# When too few runs were undisturbed, the fastest disturbed ones make up the number and the
# largest disturbance is appended to $work/contention (check_busy turns it into a note).
warmup=1
timed() {
  local t0 t1 m0 m1 c0 c1 secs other attempts=0 clean=() disturbed=() log_runs=()
  [ "$warmup" = 0 ] || "$@" > /dev/null
  while [ ${#clean[@]} -lt "$runs" ] && [ "$attempts" -lt $((3 * runs)) ]; do
    attempts=$((attempts + 1))
    m0=$(machine_cpu); children_cpu; c0=$cpu_now; t0=$(now)
    "$@" > /dev/null
    t1=$(now); children_cpu; c1=$cpu_now; m1=$(machine_cpu)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    other=$(awk -v m0="$m0" -v m1="$m1" -v c0="$c0" -v c1="$c1" -v s="$secs" \
      'BEGIN { o = ((m1 - m0) - (c1 - c0)) / s; printf "%.2f", o < 0 ? 0 : o }')
    if awk -v o="$other" -v s="$secs" 'BEGIN { exit !(o > 0.1 && s >= 1) }'; then
      disturbed+=("$secs $other"); log_runs+=("${secs}s(others:$other)")
    else
      clean+=("$secs"); log_runs+=("${secs}s")
    fi
  done
  log "  runs: ${log_runs[*]}"
  if [ ${#clean[@]} -lt "$runs" ]; then
    local fill
    fill=$(printf '%s\n' "${disturbed[@]}" | sort -g | head -n $((runs - ${#clean[@]})))
    clean+=($(echo "$fill" | awk '{ print $1 }'))
    echo "$fill" | awk '{ print $2 }' | sort -g | tail -1 >> "$work/contention"
  fi
  median "${clean[@]}"
}
# check_busy: sets $busy to a note when other processes took more than a tenth of a CPU during
# the last timed runs (the figure is then likely low), else to nothing.
busy_rows=0
check_busy() {
  busy=""
  if [ -s "$work/contention" ]; then
    busy="; ⚠ busy machine: others used up to $(sort -g "$work/contention" | tail -1) CPUs"
    busy_rows=$((busy_rows + 1))
  fi
  rm -f "$work/contention"
}
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
tokens_of() { meg-index --info --json "$1" | sed -n 's/.*"tokens":\([0-9]*\).*/\1/p'; }
rm -f "$work/contention"

# The text bytes of the corpus (UTF-8 bytes of every document's text), computed once.
if [ ! -s "$work/corpus.textbytes" ] || [ "$work/corpus.textbytes" -ot "$corpus" ]; then
  python3 -c '
import json, sys
print(sum(len(json.loads(l)["text"].encode()) for l in open(sys.argv[1], encoding="utf-8")))' \
    "$corpus" > "$work/corpus.textbytes"
fi
text_bytes=$(cat "$work/corpus.textbytes")
jsonl_bytes=$(stat -c %s "$corpus")
docs=$(wc -l < "$corpus")
text_mb=$(calc %.1f "$text_bytes / 1e6")
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
log "corpus: $docs documents, $text_mb MB of text ($(calc %.1f "$jsonl_bytes / 1e6") MB JSONL); $(nproc) cores: $cpu; load $load0"

rows=() bars=()
row() { rows+=("| ${1//|/\\|} | ${2//|/\\|} | ${3//|/\\|} | ${4//|/\\|} |"); }  # a | in a cell is escaped
# bar TEXT PASSED(awk condition): one line of the summary under the table
bar() { if awk "BEGIN { exit !($2) }"; then bars+=("- met: $1"); else bars+=("- NOT met: $1"); fi; }

# ---------------------------------------------------------------- meg-tokenize
# tokenize_rows NAME REF_MB_PER_CORE REF_LABEL STREAM_NAME TOKENIZER_ARGS...: one row per worker
# count. The first run (writing the stream that meg-index and the token count use) is the warm-up.
tokenize_rows() {
  local name=$1 ref=$2 ref_label=$3 base=$work/$4
  shift 4
  log "meg-tokenize $name: writing $base.stream (warm-up)"
  meg-tokenize -q "$@" --append-eod -o "$base.stream" "$corpus"
  meg-index -q -o "$base" < "$base.stream"
  local tokens w secs mbs tps refw per_core scale first_mbs="" first_w=""
  tokens=$(tokens_of "$base")
  for w in $workers_list; do
    log "meg-tokenize $name --workers $w"
    secs=$(warmup=0 timed sh -c 'w=$1 corpus=$2; shift 2; meg-tokenize -q "$@" --append-eod --workers "$w" "$corpus"' \
      sh "$w" "$corpus" "$@")
    check_busy
    mbs=$(calc %.2f "$text_bytes / 1e6 / $secs")
    tps=$(calc %.2f "$tokens / 1e6 / $secs")
    refw=$(calc %.1f "$ref * $w")
    per_core=$(calc %.2f "$mbs / $w")
    scale=""
    if [ -z "$first_mbs" ]; then
      first_mbs=$mbs first_w=$w
    else
      scale="; $(calc %.2f "$mbs / $first_mbs")x the $first_w-worker rate"
      bar "$name scales near-linearly: $(calc %.2f "$mbs / $first_mbs")x from $first_w to $w workers" \
          "$mbs / $first_mbs >= 0.85 * $w / $first_w"
    fi
    row "meg-tokenize $name, --workers $w" "$mbs MB/s, $tps M tokens/s ($secs s$scale$busy)" \
        "$refw MB/s ($ref_label$( [ "$w" = 1 ] && echo ", 1 core" || echo " × $w cores"))" \
        "$(calc %.2f "$mbs / $refw")x"
    bar "$name, $w worker(s): $per_core MB/s per worker ≥ 2 × $ref (aim: 10)" "$per_core >= 2 * $ref"
    log "  $mbs MB/s, $tps M tokens/s$busy"
  done
}

tokenize_rows "GPT-2 BPE" 2.3 "tokenizers GPT-2" gpt2 --tokenizer "$gpt2_vocab" --merges "$gpt2_merges"
tokenize_rows "SentencePiece BPE 2k (fortunes_spm.model)" 7.0 "SentencePiece 2k" spm --tokenizer "$spm_model"

if [ "$train" != 0 ]; then
  # A 32k SentencePiece BPE model trained by meg-tokenize on a ~10 MB slice (every 25th document).
  slice=$work/train-slice.jsonl
  model=$work/spm32k.model
  [ -s "$slice" ] && [ "$slice" -nt "$corpus" ] || awk 'NR % 25 == 3' "$corpus" > "$slice"
  slice_mb=$(calc %.1f "$(stat -c %s "$slice") / 1e6")
  log "meg-tokenize --train --vocab-size 32000 --model-type bpe on $slice_mb MB"
  secs=$(warmup=0 runs=1 timed meg-tokenize -q --train --vocab-size 32000 --model-type bpe -o "$model" "$slice")
  check_busy
  row "meg-tokenize --train --vocab-size 32000 --model-type bpe, $slice_mb MB of JSONL, $(nproc) threads" \
      "$secs s (one run$busy)" "—" "—"
  tokenize_rows "SentencePiece BPE 32k (trained above)" 7.0 "SentencePiece 2k" spm32k --tokenizer "$model"
fi

# ---------------------------------------------------------------- meg-index against cat
# Both read the stream through a pipe, as in `meg-tokenize | meg-index` (a plain `cat FILE > OUT`
# may clone the file without copying it). meg-index also fsyncs its outputs before renaming them
# into place; `cat | cat > FILE; sync FILE` is shown beside it as the like-for-like durable copy.
stream=$work/gpt2.stream
stream_bytes=$(stat -c %s "$stream")
# A small corpus gives runs of a few tens of milliseconds, mostly start-up: the stream is then
# repeated (token streams concatenate) up to 150 MB. The bytes are the same either way.
if [ "$stream_bytes" -lt 150000000 ]; then
  repeats=$(( (150000000 + stream_bytes - 1) / stream_bytes ))
  for _ in $(seq "$repeats"); do cat "$work/gpt2.stream"; done > "$work/index-input.stream"
  stream=$work/index-input.stream
  stream_bytes=$(stat -c %s "$stream")
fi
log "cat gpt2.stream | meg-index ($(calc %.1f "$stream_bytes / 1e6") MB)"
index_secs=$(timed sh -c 'cat "$2" | meg-index -q -o "$1/index-bench"' sh "$work" "$stream")
check_busy; index_busy=$busy
log "cat gpt2.stream | cat > file"
cat_secs=$(timed sh -c 'cat "$2" | cat > "$1/cat-bench.out"' sh "$work" "$stream")
check_busy; cat_busy=$busy
log "cat gpt2.stream | cat > file; sync file"
sync_secs=$(timed sh -c 'cat "$2" | cat > "$1/cat-bench.out"; sync "$1/cat-bench.out"' sh "$work" "$stream")
check_busy; sync_busy=$busy
rm -f "$work/cat-bench.out" "$work/index-bench.bin" "$work/index-bench.idx" "$work/index-input.stream"
index_mbs=$(calc %.1f "$stream_bytes / 1e6 / $index_secs")
cat_mbs=$(calc %.1f "$stream_bytes / 1e6 / $cat_secs")
sync_mbs=$(calc %.1f "$stream_bytes / 1e6 / $sync_secs")
row "cat stream | meg-index ($(calc %.0f "$stream_bytes / 1e6") MB, GPT-2)" "$index_mbs MB/s ($index_secs s$index_busy)" \
    "cat stream | cat > file: $cat_mbs MB/s ($cat_secs s$cat_busy)" "$(calc %.2f "$index_mbs / $cat_mbs")x"
row "  the same against a durable copy" "$index_mbs MB/s" \
    "cat stream | cat > file; sync: $sync_mbs MB/s ($sync_secs s$sync_busy)" "$(calc %.2f "$index_mbs / $sync_mbs")x"
bar "meg-index within 2x of cat: $(calc %.2f "$index_secs / $cat_secs")x the time of cat | cat > file, $(calc %.2f "$index_secs / $sync_secs")x with sync" \
    "$index_secs <= 2 * $cat_secs"

# ---------------------------------------------------------------- meg-blend
gpt2_tokens=$(tokens_of "$work/gpt2")
fortunes_tokens=$(tokens_of "$fortunes_gpt2")
log "meg-blend $samples samples at --seq-length 1024"
blend_secs=$(timed meg-blend -q --seq-length 1024 --samples "$samples" --seed 1234 --split 969,30,1 \
  -o "$work/bench.blend" 0.9 "$work/gpt2" 0.1 "$fortunes_gpt2")
check_busy
row "meg-blend --samples $samples --seq-length 1024: 0.9 corpus ($gpt2_tokens tokens) + 0.1 fortunes ($fortunes_tokens tokens, ~$(calc %.0f "$samples * 0.1 * 1025 / $fortunes_tokens") epochs)" \
    "$blend_secs s$busy" "—" "—"

# ---------------------------------------------------------------- the table
{
  echo "Data preparation benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD -- lib bin 2>/dev/null || echo ' + uncommitted changes to lib/ or bin/')."
  echo "Machine: $(nproc) cores ($cpu), load average at start $load0."
  echo "Corpus: $docs documents, $text_mb MB of text ($(calc %.1f "$jsonl_bytes / 1e6") MB of JSONL), scripts/bench-corpus.sh."
  echo "MB/s counts the UTF-8 bytes of the documents' text; each figure is the median of $runs runs after a warm-up (runs disturbed by other processes are repeated)."
  echo "Reference: Hugging Face tokenizers (GPT-2 byte-level BPE) and SentencePiece (BPE, 2k vocab) on one core of dictionary text (tests/data/megatron/README.md)."
  echo
  echo "| benchmark | measured | reference | ratio |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Bars (at least 2x the reference per core, aiming at 10 MB/s per core; near-linear scaling; meg-index within 2x of cat):"
  printf '%s\n' "${bars[@]}"
  if [ "$busy_rows" -gt 0 ]; then
    echo
    echo "⚠ Other processes were busy during $busy_rows row(s): those figures are likely low; run again on an idle machine."
  fi
} | tee "$work/results.md"
log "wrote $work/results.md"
