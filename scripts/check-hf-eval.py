#!/usr/bin/env python3
"""Recomputes meg-eval's per-request log-likelihoods with PyTorch transformers.

    python3 scripts/check-hf-eval.py DIR

DIR is what scripts/check-hf-eval.sh writes: for each model a folder with hf/ (the model exported
by `meg-ckpt-convert --to hf`, with its tokenizer) and runs/NAME.json (meg-eval --json) beside
runs/NAME.per.jsonl (--per-example). Each model is loaded from local files only, in float32, and
every request is scored alone as lm-evaluation-harness's HFLM does: context and continuation cut
to the last max_length + 1 tokens, the last dropped, and the continuation's log-softmax summed.
Required: |meg - transformers| < 1e-4 for every request; the same is_greedy, unless a position's
two best logits lie within 1e-4 (a tie either side may break); and for text requests, the tokens
the reference tokenizer gives as lm-eval encodes a request (an empty context is the end-of-text
token; trailing whitespace of the context moves to the continuation; the continuation is the
whole text's tokens after the context's). Exit status 0 when everything passes, 1 otherwise.
"""
import glob
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

TOLERANCE = 1e-4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load_model(path):
    # The plain attention path (no fused kernel between us and the math), in float32 whatever the
    # version's default dtype, and no TF32 in its products.
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", local_files_only=True)
    except (TypeError, ValueError):
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    return model.float()


class Encoder:
    """The exported tokenizer, encoding as lm-eval's HFLM.tok_encode (no special tokens added)."""

    def __init__(self, hf_dir):
        self.name = None
        spm_file = os.path.join(hf_dir, "tokenizer.model")
        if os.path.exists(spm_file):
            import sentencepiece
            sp = sentencepiece.SentencePieceProcessor(model_file=spm_file)
            self.encode, self.eot, self.name = sp.encode, sp.eos_id(), "sentencepiece"
        elif os.path.exists(os.path.join(hf_dir, "vocab.json")):
            # As users load it (the tokenizer classes' own constructors changed across versions).
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
            self.encode = lambda s: tok.encode(s, add_special_tokens=False)
            self.eot, self.name = tok.eos_token_id, type(tok).__name__
            if not self.encode("Hello world"):
                sys.exit(f"check-hf-eval: {self.name} from {hf_dir} encodes 'Hello world' to nothing")

    def request(self, context, continuation):
        if context == "":
            return [self.eot], self.encode(continuation)
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = self.encode(context + continuation)
        context_enc = self.encode(context)
        return context_enc, whole[len(context_enc):]


@torch.no_grad()
def score(model, context, continuation, max_length):
    tokens = (context + continuation)[-(max_length + 1):]
    inp = torch.tensor([tokens[:-1]], dtype=torch.long, device=DEVICE)
    logits = model(inp).logits[0, -len(continuation):].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(continuation, device=DEVICE)
    ll = logprobs.gather(1, target.unsqueeze(1)).sum().item()
    greedy = bool((logits.argmax(dim=-1) == target).all())
    top2 = logits.topk(2, dim=-1).values
    tie = bool(((top2[:, 0] - top2[:, 1]) < TOLERANCE).any())
    return ll, greedy, tie


def check_run(model, encoder, result_path):
    with open(result_path) as f:
        result = json.load(f)
    per_path = result_path[:-len(".json")] + ".per.jsonl"
    with open(per_path) as f:
        requests = [json.loads(line) for line in f]
    max_length = result["model"]["max_length"]
    worst, greedy_bad, token_bad, text_requests = 0.0, 0, 0, 0
    for r in requests:
        ll, greedy, tie = score(model, r["context_tokens"], r["continuation_tokens"], max_length)
        worst = max(worst, abs(ll - r["loglikelihood"]))
        if greedy != r["is_greedy"] and not tie:
            greedy_bad += 1
        if "context" in r and encoder.name:
            text_requests += 1
            want = list(encoder.request(r["context"], r["continuation"]))
            if want != [r["context_tokens"], r["continuation_tokens"]]:
                if token_bad == 0:
                    print(f"    first token difference: {r['context']!r} + {r['continuation']!r}: meg "
                          f"{[r['context_tokens'], r['continuation_tokens']]}, {encoder.name} {want}")
                token_bad += 1
    ok = worst < TOLERANCE and greedy_bad == 0 and token_bad == 0 and len(requests) == result["requests"]
    tokens = f", tokens as {encoder.name}: {text_requests - token_bad}/{text_requests}" if text_requests else ""
    print(f"  {os.path.basename(result_path)[:-5]}: {len(requests)} requests ({result['task_type']}, "
          f"{result['device']}), max |transformers - meg| = {worst:.3g}, is_greedy differs in {greedy_bad}"
          f"{tokens} ({'ok' if ok else 'FAIL'}: bound {TOLERANCE})")
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = sys.argv[1]
    models = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, "hf")))
    if not models:
        raise SystemExit(f"{root}: no exported models (run scripts/check-hf-eval.sh)")
    results = []
    for name in models:
        hf_dir = os.path.join(root, name, "hf")
        model = load_model(hf_dir).to(DEVICE).eval()
        encoder = Encoder(hf_dir)
        print(f"{name}: {type(model).__name__} on {DEVICE}")
        runs = sorted(glob.glob(os.path.join(root, name, "runs", "*.json")))
        if not runs:
            print(f"  no meg-eval results in {os.path.join(root, name, 'runs')}")
            results.append(False)
        results += [check_run(model, encoder, path) for path in runs]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
