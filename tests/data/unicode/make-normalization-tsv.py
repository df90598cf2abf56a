#!/usr/bin/env python3
"""Writes normalization.tsv beside this script: test vectors of Unicode normalization and of the full
lowercase mapping, with Python's unicodedata (str.lower() of each code point alone) as the
reference, in the spirit of Unicode's NormalizationTest.txt.

  python3 tests/data/unicode/make-normalization-tsv.py

Each line is "SOURCE<TAB>NFC<TAB>NFD<TAB>NFKC<TAB>NFKD<TAB>LOWERCASE", each a sequence of code points
in hexadecimal separated by spaces. The lines hold every code point but the Hangul syllables that some
form or lowercase maps to something else (so every code point not listed, but for those, maps to
itself everywhere), every 37th Hangul syllable, jamo sequences, marks to reorder, composition exclusions after their base, and
random sequences of bases and marks (a fixed seed).
"""
import os
import random
import unicodedata

FORMS = ("NFC", "NFD", "NFKC", "NFKD")


def assigned(cp):
    return not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"


def hexes(text):
    return " ".join(f"{ord(c):04X}" for c in text)


def lower(text):
    return "".join(c.lower() for c in text)


def main():
    rng = random.Random(14)
    cases = []
    hangul = range(0xAC00, 0xD7A4)
    changed = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and cp not in hangul and
               (any(unicodedata.normalize(f, chr(cp)) != chr(cp) for f in FORMS) or chr(cp).lower() != chr(cp))]
    cases += changed + [chr(cp) for cp in hangul[::37]]
    marks = [chr(cp) for cp in range(0x110000) if assigned(cp) and unicodedata.combining(chr(cp))]
    bases = [chr(cp) for cp in range(0x20, 0x3000) if assigned(cp) and unicodedata.combining(chr(cp)) == 0
             and unicodedata.category(chr(cp))[0] in "LN"]
    # Hangul: whole syllables in context, L V, L V T, LV T, and broken sequences (T alone, V T).
    L = [chr(0x1100 + i) for i in range(19)]
    V = [chr(0x1161 + i) for i in range(21)]
    T = [chr(0x11A8 + i) for i in range(27)]
    for _ in range(100):
        cases.append(rng.choice(L) + rng.choice(V))
        cases.append(rng.choice(L) + rng.choice(V) + rng.choice(T))
        cases.append(chr(0xAC00 + 28 * rng.randrange(399)) + rng.choice(T))  # an LV syllable and a T
        cases.append(rng.choice(V) + rng.choice(T) + rng.choice(L))
        cases.append("a" + chr(0xAC00 + rng.randrange(11172)) + rng.choice(T) + " ")
    # Marks out of order after a base, and after a precomposed letter.
    for _ in range(600):
        base = rng.choice(["a", "e", "o", "u", "A", "\u00e9", "\u1e09", "\u03b1", "\u0415", "\u0627", rng.choice(bases)])
        cases.append(base + "".join(rng.choice(marks) for _ in range(rng.randint(1, 4))))
    # Composition exclusions and singletons met after ASCII, and text around the slow stretches.
    for c in changed[:: max(1, len(changed) // 400)]:
        cases.append("x" + c + "\u0301y " + c)
    # Random mixes of bases, marks and changed characters.
    pool = bases[:2000] + marks[:300] + changed[:3000] + ["\u0301", "\u0327", "\u0323", " ", "A", "Σ"]
    for _ in range(800):
        cases.append("".join(rng.choice(pool) for _ in range(rng.randint(2, 8))))

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "normalization.tsv")
    with open(path, "w") as f:
        f.write(f"# Unicode {unicodedata.unidata_version}; written by make-normalization-tsv.py (python3 unicodedata), do not edit.\n")
        f.write("# SOURCE\tNFC\tNFD\tNFKC\tNFKD\tLOWERCASE\n")
        for text in cases:
            f.write("\t".join([hexes(text)] + [hexes(unicodedata.normalize(form, text)) for form in FORMS] +
                              [hexes(lower(text))]) + "\n")
    print(f"{path}: {len(cases)} lines")


if __name__ == "__main__":
    main()
