#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel family from its --csv output and prints a
markdown table (family, kernels, ms, share). Families are recognised from kernel names. With
--by-kernel, one row per kernel (its name less namespaces and parameter list, its template
arguments kept) with the time per launch: for a profile of one decode step, where the families
hide which layer of the step a launch belongs to.
  kernel-breakdown.py NCU_CSV [--by-kernel]"""
import argparse
import csv
import re
from collections import defaultdict

FAMILIES = [  # first match wins
    ("gemm (cuBLASLt)", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "epilogue::")),
    ("decode linear layers (small_linear)", ("small_linear",)),
    ("attention", ("attention", "flash")),
    ("kv cache append", ("kv_cache",)),
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


def kernel(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\([^()]*\)$", "", name)  # the parameter list
    return re.sub(r"(meg::)?(cuda::)?<unnamed>::|meg::cuda::", "", name)


def durations(path):
    """(kernel name, milliseconds) of each profiled launch, in launch order."""
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            yield row["Kernel Name"], float(row["Metric Value"].replace(",", "")) / 1e6  # ns -> ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--by-kernel", action="store_true")
    args = parser.parse_args()
    times, counts = defaultdict(float), defaultdict(int)
    for name, ms in durations(args.csv):
        key = kernel(name) if args.by_kernel else family(name)
        times[key] += ms
        counts[key] += 1
    total, launches = sum(times.values()), sum(counts.values())
    rows = sorted(times.items(), key=lambda kv: -kv[1])
    if args.by_kernel:
        print("| kernel | launches | us per launch | ms | share |\n|---|---|---|---|---|")
        for key, ms in rows:
            print(f"| `{key}` | {counts[key]} | {1e3 * ms / counts[key]:.2f} | {ms:.3f} | {100 * ms / total:.1f}% |")
        print(f"| total | {launches} | | {total:.3f} | 100% |")
    else:
        print("| kernel family | kernels | ms | share |\n|---|---|---|---|")
        for key, ms in rows:
            print(f"| {key} | {counts[key]} | {ms:.2f} | {100 * ms / total:.1f}% |")
        print(f"| total | {launches} | {total:.2f} | 100% |")


if __name__ == "__main__":
    main()
