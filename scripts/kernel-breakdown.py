#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel family from its --csv output and prints a
markdown table (family, kernels, ms, share). Families are recognised from kernel names."""
import csv
import sys
from collections import defaultdict

FAMILIES = [  # first match wins
    ("gemm (cuBLASLt)", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "epilogue::")),
    ("attention", ("attention", "flash")),
    ("cross-entropy", ("cross_entropy",)),
    ("layernorm / rmsnorm", ("layernorm", "rmsnorm")),
    ("gelu / swiglu", ("gelu", "swiglu")),
    ("adamw", ("adamw",)),
    ("global norm", ("sum_squares",)),
    ("bias gradients", ("bias_backward",)),
    ("gradient column sums (second stage)", ("column_sum", "accumulate_partials")),
    ("embedding", ("embedding",)),
    ("rope", ("rope",)),
    ("residual add / cast / dropout", ("add", "cast", "dropout")),
]


def family(name):
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam
    return "other: " + name[:40]


def main(path):
    times, counts = defaultdict(float), defaultdict(int)
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        fam = family(row["Kernel Name"])
        times[fam] += float(row["Metric Value"].replace(",", "")) / 1e6  # ns -> ms
        counts[fam] += 1
    total = sum(times.values())
    print("| kernel family | kernels | ms | share |\n|---|---|---|---|")
    for fam, ms in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"| {fam} | {counts[fam]} | {ms:.2f} | {100 * ms / total:.1f}% |")
    print(f"| total | {sum(counts.values())} | {total:.2f} | 100% |")


if __name__ == "__main__":
    main(sys.argv[1])
