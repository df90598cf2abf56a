#!/usr/bin/env python3
"""Single-thread encoding speed of Hugging Face `tokenizers` (GPT-2 byte-level BPE) and
`sentencepiece` on a JSONL file, so meg-tokenize can be timed side by side on the same text and CPU.

    pip install tokenizers sentencepiece
    python3 scripts/bench-hf.py corpus.jsonl [--vocab tests/data/gpt2/vocab.json]
        [--merges tests/data/gpt2/merges.txt] [--spm tests/data/megatron/fortunes_spm.model ...]
        [--runs 3] [--json-key text]

    e.g. zstd -d .bench/corpus-small.jsonl.zst -o corpus-small.jsonl
         python3 scripts/bench-hf.py corpus-small.jsonl --spm tests/data/megatron/fortunes_spm.model
         taskset -c 2 build/bin/meg-tokenize -q --workers 1 --append-eod \\
             --tokenizer tests/data/gpt2/vocab.json --merges tests/data/gpt2/merges.txt \\
             corpus-small.jsonl > /dev/null       (time it; MB/s = text bytes below / seconds)

The documents are read and decoded from JSON before the clock starts; each timed run encodes every
document's text once, one document at a time on one thread (TOKENIZERS_PARALLELISM=false and
RAYON_NUM_THREADS=1 keep `tokenizers` on one thread). MB/s counts the UTF-8 bytes of the texts, the
measure scripts/bench.sh uses for meg-tokenize. The figure is the median of --runs runs after one
warm-up run over the first 1000 documents.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"


def load_texts(path, key):
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)[key])
    return texts


def gpt2_tokenizer(vocab, merges):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    # GPT-2 exactly: byte-level BPE, the GPT-2 split regex, no prefix space, no normalizer.
    # (tokenizers 0.22.2 set up this way gave the same ids as meg-tokenize on all 338,476
    # documents of the benchmark corpus.)
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def spm_tokenizer(model):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    return lambda text: len(sp.encode(text))


def bench(name, encode, texts, text_bytes, runs):
    for t in texts[:1000]:  # warm-up: caches, lazy initialisation
        encode(t)
    times, tokens = [], 0
    for _ in range(runs):
        tokens = 0
        start = time.perf_counter()
        for t in texts:
            tokens += encode(t)
        times.append(time.perf_counter() - start)
    secs = statistics.median(times)
    mbs = text_bytes / 1e6 / secs
    print(f"{name}: {mbs:.2f} MB/s, {tokens / 1e6 / secs:.3f} M tokens/s "
          f"({tokens} tokens, median {secs:.2f} s of {', '.join(f'{t:.2f}' for t in times)})", flush=True)
    return {"tokenizer": name, "mb_per_s": mbs, "tokens_per_s": tokens / secs, "tokens": tokens,
            "seconds": times}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl", help="JSONL documents (one object per line)")
    ap.add_argument("--json-key", default="text")
    ap.add_argument("--vocab", default=os.path.join(root, "tests/data/gpt2/vocab.json"))
    ap.add_argument("--merges", default=os.path.join(root, "tests/data/gpt2/merges.txt"))
    ap.add_argument("--spm", action="append", default=None,
                    help="SentencePiece .model (repeatable; default tests/data/megatron/fortunes_spm.model)")
    ap.add_argument("--no-gpt2", action="store_true", help="skip the GPT-2 BPE run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args()
    spm_models = args.spm or [os.path.join(root, "tests/data/megatron/fortunes_spm.model")]

    texts = load_texts(args.jsonl, args.json_key)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"{args.jsonl}: {len(texts)} documents, {text_bytes / 1e6:.1f} MB of text; "
          f"one thread, median of {args.runs} runs", flush=True)
    results = []
    if not args.no_gpt2:
        import tokenizers
        results.append(bench(f"tokenizers {tokenizers.__version__} GPT-2 byte-level BPE",
                             gpt2_tokenizer(args.vocab, args.merges), texts, text_bytes, args.runs))
    for model in spm_models:
        import sentencepiece
        results.append(bench(f"sentencepiece {sentencepiece.__version__} {os.path.basename(model)}",
                             spm_tokenizer(model), texts, text_bytes, args.runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"file": args.jsonl, "documents": len(texts), "text_bytes": text_bytes,
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
