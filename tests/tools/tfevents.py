"""Reads a TensorBoard event file without TensorBoard (man/meg-formats.5, TENSORBOARD EVENT FILE),
checking both CRC-32C values of every TFRecord, and compares its scalars with a metrics file.

    python3 tfevents.py EVENTS [METRICS.jsonl]

The events of a run from iteration 0 must give every record of the metrics; those of a resumed
run (its SessionLog START after step 1) the last records, which that run wrote as it wrote its
events. Without METRICS only the records are checked. An implementation of its own, apart from
meg's, so that the test checks meg's writer against the format rather than against itself. Prints
the number of records and exits 1 with the first problem.
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spm_corrupt import parse  # noqa: E402  the protobuf wire format: [field, wire type, value]

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        assert pos + 12 <= len(data), f"{path}: byte {pos}: a record header cut short"
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert length_crc == masked(header), f"{path}: byte {pos}: the length's CRC does not match"
        body = data[pos + 12:pos + 12 + length]
        assert len(body) == length and pos + 16 + length <= len(data), f"{path}: byte {pos}: a record cut short"
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked(body), f"{path}: byte {pos}: the data's CRC does not match"
        yield body
        pos += 16 + length


def bits(value, fmt):
    """A fixed32/64 field, which parse() gives as an unsigned integer, as FMT ("<d", "<f")."""
    return struct.unpack(fmt, struct.pack("<Q" if fmt == "<d" else "<I", value))[0]


def event(body):
    """An Event as a dict: wall_time, step, and file_version, session_status or scalars {tag: float}."""
    e = {"step": 0}
    for number, wire, value in parse(body):
        if number == 1 and wire == 1:
            e["wall_time"] = bits(value, "<d")
        elif number == 2 and wire == 0:
            e["step"] = value
        elif number == 3 and wire == 2:
            e["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            e["scalars"] = {}
            for vnumber, vwire, v in parse(value):
                assert vnumber == 1 and vwire == 2, "Summary holds only values"
                tag = simple = None
                for f, w, x in parse(v):
                    if f == 1 and w == 2:
                        tag = x.decode()
                    elif f == 2 and w == 5:
                        simple = bits(x, "<f")
                assert tag is not None and simple is not None, "a value without a tag or a simple_value"
                e["scalars"][tag] = simple
        elif number == 7 and wire == 2:
            e["session_status"] = dict((f, x) for f, _, x in parse(value)).get(1, 0)
        elif number == 10 and wire == 2:
            e["writer"] = dict((f, x) for f, _, x in parse(value)).get(1, b"").decode()
        else:
            raise AssertionError(f"unexpected field {number} of wire type {wire}")
    return e


def main(events_path, metrics_path=None):
    events = [event(b) for b in records(events_path)]
    assert events and events[0].get("file_version") == "brain.Event:2", f"first event: {events[:1]}"
    assert events[0].get("writer") == "meg-pretrain", events[0]
    # Then a SessionLog START (1) at the run's first step: TensorBoard drops what older files hold
    # from there on.
    assert len(events) > 1 and events[1].get("session_status") == 1, f"second event: {events[1:2]}"
    assert all("scalars" in e for e in events[2:]), "events after the first two hold scalars"
    if metrics_path is None:
        print(len(events))
        return
    assert all(e["wall_time"] > 1.6e9 for e in events), "wall times are seconds since 1970"
    metrics = [json.loads(line) for line in open(metrics_path)]
    want = []
    for m in metrics:
        if m["split"] == "train":
            s = {"lm loss": m["loss"], "learning-rate": m["lr"], "grad-norm": m["grad_norm"],
                 "iteration-time": m["ms_per_iter"] / 1000, "tokens-per-second": m["tokens_per_s"],
                 "throughput": m["model_tflops_per_gpu"]}
            if "peak_memory_bytes" in m:
                s["mem-max-allocated-bytes"] = m["peak_memory_bytes"]
        else:
            assert m["split"] == "valid", m
            s = {"lm loss validation": m["valid_loss"], "lm loss validation ppl": m["valid_ppl"]}
        want.append((m["iteration"], s))
    got = [(e["step"], e["scalars"]) for e in events[2:]]
    start = events[1]["step"]
    if start == 1:
        assert len(got) == len(want), f"{len(got)} scalar events, {len(want)} metrics records"
    else:
        assert len(got) <= len(want), f"{len(got)} scalar events, {len(want)} metrics records"
        want = want[len(want) - len(got):]
    assert not want or start <= want[0][0], f"the run starts at step {start}, its first record is {want[0][0]}"
    for (gstep, gs), (wstep, ws) in zip(got, want):
        assert gstep == wstep, (gstep, wstep)
        assert set(ws) <= set(gs), (sorted(gs), sorted(ws))
        for tag, value in ws.items():
            # float32 in the event, float64 in the metrics
            assert abs(gs[tag] - value) <= 1e-6 * abs(value), f"step {gstep} {tag}: {gs[tag]} against {value}"
        assert all(math.isfinite(v) for v in gs.values()), gs
    print(len(events))


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except AssertionError as e:
        sys.exit(f"{sys.argv[1]}: {e}")
