#!/usr/bin/env python3
"""Reads meg-pretrain's TensorBoard events with TensorBoard's own reader and compares them with the
run's metrics file.

    python3 scripts/check-tensorboard.py EVENTS METRICS.jsonl

EVENTS is a --tensorboard-dir directory (every event file in it, as TensorBoard shows them: a
resumed run's file replaces the steps that older files hold from its first step on) or one event
file, the newest (which holds the steps from its run's start); METRICS.jsonl is the same run's metrics file (--metrics, or SAVE/metrics.jsonl), whose last
record of each iteration and split is the one that counts. TensorBoard's EventAccumulator must read
the file version "brain.Event:2", and for every scalar tag exactly the steps of the metrics (from
the first step the events hold), each value equal to the metric in float32 (relative 1e-6).
Needs the tensorboard package (pip install tensorboard), not TensorFlow. Exit status 0 when all
agree, 1 otherwise.
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator

TOLERANCE = 1e-6  # float32 keeps 24 bits: 6e-8 relative


def expected_scalars(metrics_path):
    """{tag: {step: value}} as meg-pretrain writes them from each metrics record."""
    tags = {}

    def put(tag, step, value):
        tags.setdefault(tag, {})[step] = value

    for number, line in enumerate(open(metrics_path), 1):
        if not line.strip():
            continue
        m = json.loads(line)
        step = m["iteration"]
        if m["split"] == "train":
            put("lm loss", step, m["loss"])
            put("learning-rate", step, m["lr"])
            put("grad-norm", step, m["grad_norm"])
            put("iteration-time", step, m["ms_per_iter"] / 1000)
            put("throughput", step, m["model_tflops_per_gpu"])
            put("tokens-per-second", step, m["tokens_per_s"])
            if "peak_memory_bytes" in m:
                put("mem-max-allocated-bytes", step, m["peak_memory_bytes"])
            if "comm_ms_per_iter" in m:
                put("comm-ms-per-iter", step, m["comm_ms_per_iter"])
        elif m["split"] == "valid":
            put("lm loss validation", step, m["valid_loss"])
            put("lm loss validation ppl", step, m["valid_ppl"])
        else:
            sys.exit(f"{metrics_path}:{number}: split {m['split']!r}")
    return tags


def main(events_path, metrics_path):
    acc = event_accumulator.EventAccumulator(events_path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    problems = []
    if acc.file_version != 2:
        problems.append(f"file version {acc.file_version}, expected 2 (brain.Event:2)")
    if hasattr(acc, "GetSourceWriter") and acc.GetSourceWriter() != "meg-pretrain":
        problems.append(f"source writer {acc.GetSourceWriter()!r}")
    got = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()[event_accumulator.SCALARS]}
    if not got:
        sys.exit(f"{events_path}: no scalars")
    first = min(min(steps) for steps in got.values())
    want = {tag: {s: v for s, v in steps.items() if s >= first} for tag, steps in expected_scalars(metrics_path).items()}
    want = {tag: steps for tag, steps in want.items() if steps}
    if set(got) != set(want):
        problems.append(f"tags {sorted(got)}, the metrics give {sorted(want)}")
    count = 0
    for tag in sorted(set(got) & set(want)):
        if set(got[tag]) != set(want[tag]):
            problems.append(f"{tag!r}: steps {sorted(got[tag])}, the metrics have {sorted(want[tag])}")
            continue
        for step, value in want[tag].items():
            count += 1
            if abs(got[tag][step] - value) > TOLERANCE * abs(value):
                problems.append(f"{tag!r} step {step}: {got[tag][step]} in the events, {value} in the metrics")
    for p in problems[:20]:
        print(f"{events_path}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"{events_path}: {len(got)} tags, {count} scalars from step {first}, all as in {metrics_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
