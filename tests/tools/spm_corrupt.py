#!/usr/bin/env python3
"""Corrupts SentencePiece models and checks what meg-tokenize makes of each (test_spm_corrupt.sh).

For every variant of MODEL (bit flips, truncations, inserted bytes, and edits of single fields made
through the wire format), meg-tokenize either refuses it (exit 1, one line on stderr, no output
file) or tokenizes TEXT exactly as the reference, spm_encode of Debian's sentencepiece package,
does with the same variant. A variant the reference refuses or crashes on must be refused. The
variants come from a fixed seed, so a failure names one that can be made again.

usage: spm_corrupt.py TEXT VARIANTS MODEL...   (meg-tokenize and spm_encode on PATH)
"""
import math
import os
import random
import struct
import subprocess
import sys

# --- The protobuf wire format, as far as sentencepiece_model.proto uses it.


def varint(v):
    v &= (1 << 64) - 1  # negative int32 values go as ten-byte varints
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def parse(b):
    """[field, wire, value] of each field of message B; VALUE is an int, or bytes for wire type 2."""
    fields, i = [], 0
    while i < len(b):
        key, i = read_varint(b, i)
        wire = key & 7
        if wire == 0:
            v, i = read_varint(b, i)
        elif wire == 5:
            v, i = struct.unpack_from("<I", b, i)[0], i + 4
        elif wire == 1:
            v, i = struct.unpack_from("<Q", b, i)[0], i + 8
        else:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        fields.append([key >> 3, wire, v])
    return fields


def serialize(fields):
    out = bytearray()
    for field, wire, v in fields:
        out += varint(field << 3 | wire)
        if wire == 0:
            out += varint(v)
        elif wire == 5:
            out += struct.pack("<I", v)
        elif wire == 1:
            out += struct.pack("<Q", v)
        else:
            out += varint(len(v)) + v
    return bytes(out)


def float_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


class Model:
    """A model split into its top-level fields, with helpers to edit one field and put it back."""

    def __init__(self, data):
        self.fields = parse(data)
        self.pieces = [i for i, f in enumerate(self.fields) if f[0] == 1]

    def copy(self):
        m = Model.__new__(Model)
        m.fields = [list(f) for f in self.fields]
        m.pieces = list(self.pieces)
        return m

    def bytes(self):
        return serialize(self.fields)

    def piece(self, k):
        return parse(self.fields[self.pieces[k]][2])

    def set_piece(self, k, sub):
        self.fields[self.pieces[k]][2] = serialize(sub)

    def edit(self, number, fn):
        """Applies FN to the parsed sub-message of the first top-level field NUMBER."""
        for f in self.fields:
            if f[0] == number:
                sub = parse(f[2])
                fn(sub)
                f[2] = serialize(sub)
                return self
        raise KeyError(number)

    def unk(self):
        return next(k for k in range(len(self.pieces)) if dict((x[0], x[2]) for x in self.piece(k)).get(3) == 2)


def set_field(sub, number, wire, value):
    for f in sub:
        if f[0] == number:
            f[1], f[2] = wire, value
            return
    sub.append([number, wire, value])


def charsmap_span(data):
    """Where normalizer_spec's precompiled_charsmap lies in DATA: (start, end)."""
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        n, j = read_varint(data, i) if key & 7 == 2 else (0, i)
        if key >> 3 == 3:
            k = j
            while k < j + n:
                sk, k = read_varint(data, k)
                if sk & 7 == 0:
                    _, k = read_varint(data, k)
                    continue
                sn, k = read_varint(data, k)
                if sk >> 3 == 2:
                    return k, k + sn
                k += sn
        if key & 7 == 0:
            _, i = read_varint(data, i)
        elif key & 7 == 5:
            i += 4
        elif key & 7 == 1:
            i += 8
        else:
            i = j + n
    return 0, 0


# --- The variants.


def field_edits(model, units, rng):
    """(name, bytes, must_refuse) for edits of single fields; UNITS: of the normalization trie."""
    m = lambda: model.copy()  # noqa: E731
    n = len(model.pieces)
    unk = model.unk()
    out = []

    def piece_edit(name, k, number, wire, value, must_refuse):
        v = m()
        sub = v.piece(k)
        set_field(sub, number, wire, value)
        v.set_piece(k, sub)
        out.append((name, v.bytes(), must_refuse))

    normal = [k for k in range(n) if dict((x[0], x[2]) for x in model.piece(k)).get(3, 1) == 1]
    for k in rng.sample(normal, 4):
        piece_edit(f"piece {k} score NaN", k, 2, 5, float_bits(math.nan), True)
        piece_edit(f"piece {k} score inf", k, 2, 5, float_bits(math.inf), True)
        piece_edit(f"piece {k} type 9", k, 3, 0, 9, True)
        piece_edit(f"piece {k} type 0", k, 3, 0, 0, True)
        piece_edit(f"piece {k} second UNKNOWN", k, 3, 0, 2, True)
        piece_edit(f"piece {k} empty", k, 1, 2, b"", True)
        piece_edit(f"piece {k} invalid UTF-8", k, 1, 2, b"a\xff", True)
        piece_edit(f"piece {k} score as varint", k, 2, 0, 7, True)
        piece_edit(f"piece {k} BYTE type", k, 3, 0, 6, True)
        piece_edit(f"piece {k} score -1e30", k, 2, 5, float_bits(-1e30), False)
        piece_edit(f"piece {k} CONTROL", k, 3, 0, 3, False)
        piece_edit(f"piece {k} UNUSED", k, 3, 0, 5, False)
        piece_edit(f"piece {k} USER_DEFINED", k, 3, 0, 4, False)
        piece_edit(f"piece {k} renamed", k, 1, 2, "x\u2581y".encode(), False)
        other = dict((x[0], x[2]) for x in model.piece(rng.choice(normal)))[1]
        if other != dict((x[0], x[2]) for x in model.piece(k))[1]:
            piece_edit(f"piece {k} duplicates another", k, 1, 2, other, True)
    piece_edit("unk piece NORMAL", unk, 3, 0, 1, True)
    v = m()
    dup = v.fields[v.pieces[n // 2]]
    v.fields.insert(v.pieces[-1] + 1, list(dup))
    out.append(("piece appended twice", v.bytes(), True))
    v = m()
    del v.fields[v.pieces[unk]]
    out.append(("unk piece removed", v.bytes(), True))
    v = m()
    del v.fields[v.pieces[-1]]
    out.append(("last piece removed", v.bytes(), False))

    def spec_edit(name, number, edits, must_refuse):
        v = m()
        v.edit(number, lambda sub: [set_field(sub, *e) for e in edits])
        out.append((name, v.bytes(), must_refuse))

    for value, bad in [(n, True), (n + 1000, True), (-1, True), (1, True), (2**31 - 1, True)]:
        spec_edit(f"unk_id {value}", 2, [(40, 0, value)], bad)
    for number, name in [(41, "bos_id"), (42, "eos_id"), (43, "pad_id")]:
        spec_edit(f"{name} {n}", 2, [(number, 0, n)], True)
        spec_edit(f"{name} -5", 2, [(number, 0, -5)], True)
        spec_edit(f"{name} -1", 2, [(number, 0, -1)], False)
    for value in [0, 5, 9, 2**32 + 2]:
        spec_edit(f"model_type {value}", 2, [(3, 0, value)], True)
    for value in [1, 2, 3, 4]:
        spec_edit(f"model_type {value}", 2, [(3, 0, value)], False)
    byte_fallback = any(f[0] == 35 and f[2] for f in parse(next(f[2] for f in model.fields if f[0] == 2)))
    spec_edit("byte_fallback flipped", 2, [(35, 0, int(not byte_fallback))], True)
    spec_edit("whitespace as suffix", 2, [(24, 0, 1)], False)
    spec_edit("whitespace-only pieces", 2, [(26, 0, 1)], False)
    spec_edit("unk_id as fixed32", 2, [(40, 5, 0)], True)
    spec_edit("unknown field", 2, [(999, 2, b"extension")], False)
    for number, name in [(3, "add_dummy_prefix"), (4, "remove_extra_whitespaces"), (5, "escape_whitespaces")]:
        spec_edit(f"{name} off", 3, [(number, 0, 0)], False)
    spec_edit("normalizer named identity", 3, [(1, 2, b"identity")], False)
    spec_edit("normalizer without name", 3, [(1, 2, b"")], False)
    spec_edit("custom rules named", 3, [(6, 2, b"41\t42\n")], False)

    def charsmap_edit(name, fn, must_refuse):
        def edit(sub):
            for f in sub:
                if f[0] == 2:
                    f[2] = fn(bytearray(f[2]))
        v = m()
        v.edit(3, edit)
        out.append((name, v.bytes(), must_refuse))

    def trie_size(delta):
        def fn(b):
            struct.pack_into("<I", b, 0, (struct.unpack_from("<I", b)[0] + delta) & 0xFFFFFFFF)
            return bytes(b)
        return fn

    for delta in [1, 4, -4, 2**31, -(2**31)]:
        charsmap_edit(f"trie size {delta:+}", trie_size(delta), delta % 4 != 0 or abs(delta) > 4)
    charsmap_edit("outputs without their last NUL", lambda b: bytes(b[:-1]), False)
    charsmap_edit("table of 3 bytes", lambda b: bytes(b[:3]), True)
    charsmap_edit("table without outputs", lambda b: bytes(b[:4 + struct.unpack_from("<I", b)[0]]), False)
    for _ in range(24):
        def unit(b, at=rng.randrange(units), v=rng.getrandbits(32)):
            struct.pack_into("<I", b, 4 + 4 * at, v)
            return bytes(b)
        charsmap_edit("random trie unit", unit, False)

    v = m()
    v.fields.append([2, 2, serialize([[40, 0, 0]])])
    out.append(("trainer_spec repeated (merged)", v.bytes(), False))
    v = m()
    v.fields.append([4, 2, serialize([[1, 2, serialize([[1, 2, b"hello"], [2, 2, b"not this"]])]])])
    out.append(("failing self-test", v.bytes(), True))
    v = m()
    v.fields = [f for f in v.fields if f[0] != 2]
    out.append(("no trainer_spec", v.bytes(), True))
    v = m()
    v.fields = [f for f in v.fields if f[0] == 1]
    out.append(("pieces only", v.bytes(), True))
    return out


def variants(data, count, rng):
    model = Model(data)
    start, end = charsmap_span(data)
    out = field_edits(model, struct.unpack_from("<I", data, start)[0] // 4, rng)
    outside = [i for i in range(len(data)) if not start <= i < end]

    def flipped(positions):
        b = bytearray(data)
        for p in positions:
            b[p] ^= 1 << rng.randrange(8)
        return bytes(b)

    while len(out) < count:
        kind = len(out) % 6
        if kind == 0:
            out.append(("bit flip", flipped([rng.randrange(len(data))]), False))
        elif kind == 1:
            out.append(("bit flips outside the table", flipped(rng.sample(outside, rng.randint(1, 3))), False))
        elif kind == 2:
            out.append(("bit flip in the table", flipped([rng.randrange(start, end)]), False))
        elif kind == 3:
            out.append(("truncated", data[:rng.randrange(len(data))], False))
        elif kind == 4:
            at = rng.randrange(len(data) + 1)
            out.append(("bytes inserted", data[:at] + rng.randbytes(rng.randint(1, 4)) + data[at:], False))
        else:
            at = rng.choice(outside)
            out.append(("bytes overwritten", data[:at] + rng.randbytes(rng.randint(1, 8)) + data[at + 8:], False))
    return out


# --- Running meg-tokenize and the reference on each.


def meg_tokens(path):
    b = open(path, "rb").read()
    assert b[:8] == b"MEGTOKS\0", path
    width = b[20]
    i, docs = 32, []
    while True:
        (count,) = struct.unpack_from("<I", b, i)
        i += 4
        if count == 0xFFFFFFFF:
            return docs
        fmt = "<%d%s" % (count, "H" if width == 2 else "i")
        docs.append(list(struct.unpack_from(fmt, b, i)))
        i += count * width


def check(name, data, must_refuse, text, lines, work):
    model, out = os.path.join(work, "v.model"), os.path.join(work, "v.tok")
    with open(model, "wb") as f:
        f.write(data)
    if os.path.exists(out):
        os.remove(out)
    meg = subprocess.run(["meg-tokenize", "-q", "--tokenizer", model, "--format", "text", "-o", out, text],
                         capture_output=True, timeout=60)
    err = meg.stderr.decode(errors="replace")
    if meg.returncode == 1:
        if len(err.splitlines()) != 1 or not err.strip():
            return f"refused with {len(err.splitlines())} lines on stderr: {err!r}"
        if os.path.exists(out):
            return "refused, but left its output file"
        return "refused"
    if meg.returncode != 0:
        return f"exited {meg.returncode}: {err!r}"
    if must_refuse:
        return "accepted a model that must be refused"
    try:
        ref = subprocess.run(["spm_encode", "--model", model, "--output_format=id"], stdin=open(text, "rb"),
                             capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "accepted a model the reference hangs on"
    if ref.returncode != 0:
        return f"accepted a model the reference refuses (exit {ref.returncode}): {ref.stderr[-300:]!r}"
    expected = [[int(t) for t in line.split()] for line in ref.stdout.decode().splitlines()]
    got = meg_tokens(out)
    if got != expected[:len(lines)]:
        bad = next((k for k in range(min(len(got), len(expected))) if got[k] != expected[k]), None)
        return f"accepted, but line {bad} gives {got[bad] if bad is not None else got} " \
               f"instead of {expected[bad] if bad is not None else expected}"
    return "accepted"


def main():
    text, count, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    lines = open(text, encoding="utf-8").read().splitlines()
    work = os.path.dirname(os.path.abspath(text))
    failures, tally = [], {}
    for seed, path in enumerate(models):
        data = open(path, "rb").read()
        for k, (name, variant, must_refuse) in enumerate(variants(data, count, random.Random(seed))):
            outcome = check(name, variant, must_refuse, text, lines, work)
            kind = outcome if outcome in ("refused", "accepted") else "FAILED"
            tally[kind] = tally.get(kind, 0) + 1
            if kind == "FAILED":
                failures.append(f"{os.path.basename(path)} variant {k} ({name}): {outcome}")
    print(f"{sum(tally.values())} variants: {tally.get('refused', 0)} refused, {tally.get('accepted', 0)} accepted "
          f"with the reference's tokens, {len(failures)} failed")
    for f in failures[:20]:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures or not tally.get("refused") or not tally.get("accepted") else 0


if __name__ == "__main__":
    sys.exit(main())
