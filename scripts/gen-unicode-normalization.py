#!/usr/bin/env python3
"""Writes lib/tokenizer/unicode_normalization_data.inc: the per-code-point data of Unicode
normalization (UAX #15) and of the full lowercase mapping, from this Python's unicodedata.

  python3 scripts/gen-unicode-normalization.py [OUTPUT_FILE]

Each code point has a record: its canonical combining class, whether it is a stable boundary in
each form (see below), and offsets into one pool of code point sequences for its full canonical
decomposition, its full compatibility decomposition and its full lowercase mapping (0: none).
Records are found in two stages: kBlocks[cp >> 7] names a block of 128 record indexes in
kRecordIndex; equal blocks are stored once. Hangul syllables decompose and compose by the
algorithm of the standard, so the tables leave them out (but not their stability flags).

A code point is a stable boundary of a form when it is a starter (class 0), the form maps it to
itself, and, for the composing forms, no composition pair has it second (UAX #15's quick check
"Yes" with class 0). Text between two such code points normalizes on its own; a run of them is
the text's normalization as it is.

Lowercase is Python's str.lower() of the code point alone: UnicodeData's simple mapping overridden
by SpecialCasing's unconditional ones (U+0130 -> U+0069 U+0307), which is Rust's
char::to_lowercase; a lone U+03A3 is not final, so it maps to U+03C3.
"""
import os
import sys
import unicodedata

MAX_CP = 0x110000
BLOCK_SHIFT = 7
BLOCK = 1 << BLOCK_SHIFT
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3
FLAG_NFD, FLAG_NFKD, FLAG_NFC, FLAG_NFKC = 1, 2, 4, 8


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def compositions():
    """(first, second) -> composite for the primary composites: the canonical decompositions of two
    code points that canonical composition gives back (so no exclusions, singletons or non-starter
    decompositions)."""
    pairs = {}
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
            pairs[(parts[0], parts[1])] = cp
    return pairs


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "lib", "tokenizer", "unicode_normalization_data.inc"))
    pairs = compositions()
    seconds = {second for (_, second) in pairs}
    seconds |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo

    pool = [0]  # offset 0: the empty sequence, "no mapping"
    pool_index = {(): 0}

    def sequence(text, cp):
        if text == chr(cp):
            return 0
        key = tuple(ord(c) for c in text)
        if key not in pool_index:
            pool_index[key] = len(pool)
            pool.extend((len(key),) + key)
        return pool_index[key]

    records, record_index, per_cp = [], {}, []
    for cp in range(MAX_CP):
        c = chr(cp)
        if is_surrogate(cp):
            record = (0, FLAG_NFD | FLAG_NFKD | FLAG_NFC | FLAG_NFKC, 0, 0, 0)
        else:
            ccc = unicodedata.combining(c)
            forms = {f: unicodedata.normalize(f, c) for f in ("NFD", "NFKD", "NFC", "NFKC")}
            flags = 0
            if ccc == 0:
                flags |= FLAG_NFD if forms["NFD"] == c else 0
                flags |= FLAG_NFKD if forms["NFKD"] == c else 0
                flags |= FLAG_NFC if forms["NFC"] == c and cp not in seconds else 0
                flags |= FLAG_NFKC if forms["NFKC"] == c and cp not in seconds else 0
            hangul = HANGUL_FIRST <= cp <= HANGUL_LAST
            canonical = 0 if hangul else sequence(forms["NFD"], cp)
            compatibility = 0 if hangul else sequence(forms["NFKD"], cp)
            record = (ccc, flags, canonical, compatibility, sequence(c.lower(), cp))
        if record not in record_index:
            record_index[record] = len(records)
            records.append(record)
        per_cp.append(record_index[record])

    # What the normalizer's fast paths assume, checked here rather than trusted.
    assert all(records[per_cp[cp]][1] == 15 for cp in range(0x80)), "ASCII must be stable in every form"
    for cp in range(MAX_CP):
        ccc, flags, canonical, _, _ = records[per_cp[cp]]
        if flags & FLAG_NFC and canonical:  # a stable precomposed character: its first part is no second
            assert pool[canonical + 1] not in seconds, hex(cp)
    assert len(records) < 1 << 16 and len(pool) < 1 << 16

    blocks, block_index, stage1 = [], {}, []
    for start in range(0, MAX_CP, BLOCK):
        block = tuple(per_cp[start:start + BLOCK])
        if block not in block_index:
            block_index[block] = len(blocks)
            blocks.append(block)
        stage1.append(block_index[block])
    assert len(blocks) < 1 << 16

    def rows(values, per_row, fmt):
        items = [fmt(v) for v in values]
        return "\n".join("    " + ", ".join(items[i:i + per_row]) + "," for i in range(0, len(items), per_row))

    keys = sorted((first << 42) | (second << 21) | composite for (first, second), composite in pairs.items())
    header = f"""// Generated by scripts/gen-unicode-normalization.py from the Unicode {unicodedata.unidata_version} data of Python
// {sys.version.split()[0]}'s unicodedata; do not edit. Regenerate with:
//   python3 scripts/gen-unicode-normalization.py
//
// Included by unicode_normalization.cpp, which defines Record and explains the tables.
"""
    body = f"""{header}
constexpr const char* kUnicodeVersion = "{unicodedata.unidata_version}";
constexpr int kBlockShift = {BLOCK_SHIFT};

// The record index block of each 128 code points.
constexpr uint16_t kBlocks[{len(stage1)}] = {{
{rows(stage1, 16, str)}
}};

// {len(blocks)} distinct blocks of 128 record indexes.
constexpr uint16_t kRecordIndex[{len(blocks) * BLOCK}] = {{
{rows([i for b in blocks for i in b], 16, str)}
}};

// {{combining class, stable flags (1 NFD, 2 NFKD, 4 NFC, 8 NFKC), canonical decomposition,
// compatibility decomposition, lowercase}}: offsets into kSequences.
constexpr Record kRecords[{len(records)}] = {{
{rows(records, 4, lambda r: "{" + ", ".join(map(str, r)) + "}")}
}};

// Sequences of code points, each its length then its code points; offset 0 is the empty one.
constexpr char32_t kSequences[{len(pool)}] = {{
{rows(pool, 12, lambda v: f"0x{v:x}")}
}};

// The primary composites: first << 42 | second << 21 | composite, sorted.
constexpr uint64_t kCompositions[{len(keys)}] = {{
{rows(keys, 6, lambda v: f"0x{v:016x}")}
}};
"""
    with open(out_path, "w") as f:
        f.write(body)
    print(f"{out_path}: {len(blocks)} blocks, {len(records)} records, {len(pool)} sequence code points, "
          f"{len(keys)} compositions", file=sys.stderr)


if __name__ == "__main__":
    main()
