#!/usr/bin/env bash
# Two builds of meg side by side on one CUDA machine, in one run: training throughput (bench_train:
# GPT-2 124M, 355M, 1.56B, Llama 1B) and decode steps (bench_generate: GPT-2 124M, GPT-2 1.56B,
# Llama 1B at batch 1 and 32, greedy), each benchmark alternating between the builds ROUNDS times
# (default 2), then one table: each figure's best of the rounds for both builds and their ratio.
# For a change that must keep the speed: the ratio new / old should be 1 within noise.
#   scripts/bench-compare.sh OLD_BUILD NEW_BUILD [ROUNDS]
set -euo pipefail
old=$1 new=$2 rounds=${3:-2}
export NCCL_NVLS_ENABLE=0
log=$(mktemp -d)
for r in $(seq "$rounds"); do
  for side in old new; do
    dir=${!side}
    "$dir/tests/bench_train" --steps 10 >"$log/train-$side-$r.md"
    for b in 1 32; do
      "$dir/tests/bench_generate" --phase decode --batch $b --sampling greedy gpt2-124m gpt2-1.5b llama-1b \
        >"$log/decode$b-$side-$r.md"
    done
  done
done
python3 - "$log" "$rounds" <<'PY'
import glob, os, sys
log, rounds = sys.argv[1], int(sys.argv[2])
def rows(path, key_cols, value_col):
    out = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) <= value_col or not cells[value_col] or cells[0] in ("model", "---"):
            continue
        v = cells[value_col].rstrip("k")
        try:
            out[" ".join(cells[i] for i in key_cols)] = float(v) * (1e3 if cells[value_col].endswith("k") else 1)
        except ValueError:
            pass
    return out
print("| benchmark | case | old | new | new / old |\n|---|---|---|---|---|")
for bench, keys, col, unit in (("train", (0, 1), 4, "tokens/s"), ("decode1", (0, 2), 5, "tokens/s"),
                               ("decode32", (0, 2), 5, "tokens/s")):
    best = {}
    for side in ("old", "new"):
        for r in range(1, rounds + 1):
            for k, v in rows(f"{log}/{bench}-{side}-{r}.md", keys, col).items():
                best[(side, k)] = max(best.get((side, k), 0), v)
    for k in sorted({k for s, k in best if s == "old"}):
        o, n = best.get(("old", k), 0), best.get(("new", k), 0)
        print(f"| {bench} {unit} | {k} | {o:.0f} | {n:.0f} | {n / o if o else 0:.3f} |")
PY
