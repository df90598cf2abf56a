#!/usr/bin/env bash
# meg-ckpt-convert's rate against a plain copy of the same bytes (issue 6's bar: half of cp's).
# Makes a one-process checkpoint of PRESET's shape (parameters and AdamW moments, fp32: 12 bytes a
# parameter; tests/bench/bench_ckpt_make.cpp), then times, each followed by sync:
#   cp -r              the checkpoint, as the reference of resharding
#   to LAYOUT          meg-ckpt-convert LAYOUT (checks every input checksum first, then streams;
#                      it syncs what it writes); default --tp 5 --pp 2 (GPT-2 1.5B has 25 heads)
#   back to tp 1       meg-ckpt-convert of that output back to one process
#   cp model           the parameters' file alone, as the reference of the Hugging Face moves
#                      (they move the parameters only)
#   to hf fp32, bf16   meg-ckpt-convert --to hf --dtype ... (checks the parameters' checksums first)
#   from hf fp32       meg-ckpt-convert --from hf of the fp32 export, to one process: it writes the
#                      parameters and zero moments, the checkpoint's bytes, against cp -r
# and checks the round trip gave the original files. Rates are the bytes of the row's reference
# over the wall time. The page cache is not dropped: with enough memory the reads come from it, for
# cp as for the converter. Needs about 3 times the checkpoint's size free under OUT_DIR.
#   scripts/bench-ckpt-convert.sh BUILD_DIR [PRESET [LAYOUT]]   (default gpt2-1.5b: 18.7 GB)
set -euo pipefail
build=${1:-build}
preset=${2:-gpt2-1.5b}
layout=${3:---tp 5 --pp 2}
out=${OUT_DIR:-.bench/ckpt-convert}
export PATH="$build/bin:$PATH"
rm -rf "$out"
mkdir -p "$out"

now() { date +%s.%N; }
# timed LABEL REFERENCE COMMAND...: runs COMMAND then sync; prints "LABEL|REFERENCE|SECONDS".
timed() {
  local label=$1 reference=$2 start
  shift 2
  start=$(now)
  "$@"
  sync
  echo "$label|$reference|$(echo "$(now) - $start" | bc -l)"
}

"$build/tests/bench_ckpt_make" "$preset" "$out/src" >/dev/null
src=$out/src/iter_0000001
bytes=$(du -cb "$src"/* | tail -1 | cut -f1)
model_bytes=$(stat -c %s "$src/model.safetensors")
need=$((bytes * 3))
free=$(df -B1 --output=avail "$out" | tail -1)
[ "$free" -gt "$need" ] || { echo "need $need bytes free under $out, have $free" >&2; exit 1; }
sync

results=$(
  timed "cp -r" all cp -r "$src" "$out/copy"
  rm -rf "$out/copy"
  timed "to $layout" all meg-ckpt-convert -q --load "$src" --save "$out/layout" $layout
  timed "back to tp 1" all meg-ckpt-convert -q --load "$out/layout" --save "$out/back"
  for f in model optimizer; do
    cmp "$src/$f.safetensors" "$out/back/iter_0000001/$f.safetensors" || { echo "round trip differs: $f" >&2; exit 1; }
  done
  rm -rf "$out/layout" "$out/back"
  timed "cp model.safetensors" model cp "$src/model.safetensors" "$out/model-copy"
  rm -f "$out/model-copy"
  timed "to hf, fp32" model meg-ckpt-convert -q --load "$src" --to hf --save "$out/hf32"
  timed "to hf, bf16" model meg-ckpt-convert -q --load "$src" --to hf --dtype bf16 --save "$out/hf16"
  timed "from hf fp32 to tp 1" all meg-ckpt-convert -q --from hf "$out/hf32" --save "$out/imported"
)
hf32=$(du -cb "$out"/hf32/*.safetensors | tail -1 | cut -f1)
hf16=$(du -cb "$out"/hf16/*.safetensors | tail -1 | cut -f1)
rm -rf "$out"

printf '%s checkpoint, %.2f GB (parameters and AdamW moments, fp32), of which parameters %.2f GB\n' "$preset" \
  "$(echo "$bytes / 1000000000" | bc -l)" "$(echo "$model_bytes / 1000000000" | bc -l)"
printf 'Hugging Face exports: fp32 %.2f GB, bf16 %.2f GB of safetensors\n\n' "$(echo "$hf32 / 1000000000" | bc -l)" \
  "$(echo "$hf16 / 1000000000" | bc -l)"
cp_all=$(echo "$results" | awk -F'|' '$1 == "cp -r" {print $3}')
cp_model=$(echo "$results" | awk -F'|' '$1 == "cp model.safetensors" {print $3}')
printf '| step | GB moved | seconds | GB/s | of cp |\n|---|---|---|---|---|\n'
echo "$results" | while IFS='|' read -r label reference secs; do
  if [ "$reference" = all ]; then n=$bytes cp_secs=$cp_all; else n=$model_bytes cp_secs=$cp_model; fi
  printf '| %s | %.2f | %.2f | %.2f | %.2f |\n' "$label" "$(echo "$n / 1000000000" | bc -l)" "$secs" \
    "$(echo "$n / 1000000000 / $secs" | bc -l)" "$(echo "$cp_secs / $secs" | bc -l)"
done
