#!/usr/bin/env python3
"""Checks a SentencePiece model on a JSONL corpus through meg-tokenize (on PATH): every document comes
back from --decode exactly as it went in, and every line of the corpus gets the ids that the
library's own spm_encode gives it (spm_encode reads a line at a time, so whole documents with line
breaks are compared by the unit tests, against the library's whole-text path).

usage: spm_roundtrip.py CORPUS.jsonl MODEL [lossy]   ("lossy": expect some documents to change)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spm_corrupt import meg_tokens  # noqa: E402


def main():
    corpus, model = sys.argv[1], sys.argv[2]
    lossy = sys.argv[3:] == ["lossy"]
    docs = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
    subprocess.run(["meg-tokenize", "-q", "--tokenizer", model, "-o", "rt.tok", corpus], check=True)
    decoded = subprocess.run(["meg-tokenize", "-q", "--tokenizer", model, "--decode", "rt.tok"], check=True,
                             capture_output=True).stdout.decode("utf-8").splitlines()
    back = [json.loads(line)["text"] for line in decoded]
    same = sum(a == b for a, b in zip(docs, back)) if len(back) == len(docs) else 0
    changed = [(a, b) for a, b in zip(docs, back) if a != b]

    # meg's --format text ends a line at "\n" or "\r\n", so a line's last "\r" is left out here.
    lines = [line for doc in docs for line in doc.removesuffix("\r").replace("\r\n", "\n").split("\n") if line]
    with open("rt.txt", "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    subprocess.run(["meg-tokenize", "-q", "--tokenizer", model, "--format", "text", "-o", "rt-lines.tok", "rt.txt"],
                   check=True)
    ref = subprocess.run(["spm_encode", "--model", model, "--output_format=id"], stdin=open("rt.txt", "rb"),
                         capture_output=True, check=True)
    expected = [[int(t) for t in line.split()] for line in ref.stdout.decode().splitlines()]
    got = meg_tokens("rt-lines.tok")
    agree = sum(a == b for a, b in zip(expected, got)) if len(expected) == len(got) == len(lines) else 0

    print(f"{len(docs)} documents: {same} decode to themselves; {len(lines)} lines: {agree} with spm_encode's ids")
    ok = agree == len(lines) and (same < len(docs) if lossy else same == len(docs))
    if not ok:
        for a, b in changed[:3]:
            print(f"FAIL: {a[:120]!r} decodes to {b[:120]!r}", file=sys.stderr)
        bad = next((k for k in range(min(len(got), len(expected))) if got[k] != expected[k]), None)
        if bad is not None:
            print(f"FAIL: line {lines[bad][:120]!r}: meg {got[bad]}, spm_encode {expected[bad]}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
