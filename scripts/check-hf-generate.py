#!/usr/bin/env python3
"""meg-generate's greedy completions against transformers' generate.

    python3 scripts/check-hf-generate.py prompts HF_DIR    prompts of random token ids, as JSONL
    python3 scripts/check-hf-generate.py compare DIR       DIR as scripts/check-hf-generate.sh leaves it

compare loads each model's hf/ export in float32 (eager attention, no TF32) and, for every prompt of
prompts.jsonl, runs generate() greedily for as many new tokens as meg-generate's --max-tokens,
stopping at the config's eos_token_id (meg's end-of-document token). Every meg-*.jsonl (one per
device) must hold the same tokens: the completion's ids equal generate()'s new tokens before any
eos, with finish_reason "eod" when generate() stopped at eos and "length" otherwise. Where the two
best logits of a step lie within 1e-4 of each other a tie may break either way, so the comparison
of that prompt stops there. Exit status 0 when everything passes, 1 otherwise.
"""
import glob
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

MAX_TOKENS = 40  # meg-generate's --max-tokens in check-hf-generate.sh
TIE = 1e-4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def write_prompts(hf_dir):
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    rng = random.Random(1234)
    for _ in range(16):
        ids = [rng.randrange(config["vocab_size"]) for _ in range(rng.randint(1, 16))]
        print(json.dumps({"prompt_ids": ids}))


def load_model(path):
    torch.backends.cuda.matmul.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", local_files_only=True)
    return model.float().to(DEVICE).eval()


def reference(model, prompt, eos):
    """generate()'s new tokens (eos excluded), whether it stopped at eos, and the first step whose
    two best logits tie (None when none does)."""
    inputs = torch.tensor([prompt], device=DEVICE)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                             max_new_tokens=MAX_TOKENS, eos_token_id=eos, pad_token_id=eos if eos is not None else 0,
                             output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, len(prompt):].tolist()
    tie = None
    for step, scores in enumerate(out.scores):
        top = torch.topk(scores[0].float(), 2).values
        if float(top[0] - top[1]) < TIE:
            tie = step
            break
    stopped = eos is not None and eos in new
    if stopped:
        new = new[:new.index(eos)]
    return new, stopped, tie


def compare(root):
    failures = checked = 0
    for model_dir in sorted(glob.glob(os.path.join(root, "*", "hf"))):
        name = os.path.basename(os.path.dirname(model_dir))
        eos = json.load(open(os.path.join(model_dir, "config.json"))).get("eos_token_id")
        model = load_model(model_dir)
        prompts = [json.loads(line)["prompt_ids"] for line in open(os.path.join(os.path.dirname(model_dir), "prompts.jsonl"))]
        refs = [reference(model, p, eos) for p in prompts]
        for path in sorted(glob.glob(os.path.join(os.path.dirname(model_dir), "meg-*.jsonl"))):
            results = [json.loads(line) for line in open(path)]
            if len(results) != len(prompts):
                print(f"{path}: {len(results)} results for {len(prompts)} prompts")
                failures += 1
                continue
            for i, (r, (want, stopped, tie)) in enumerate(zip(results, refs)):
                got = r["completion_ids"]
                checked += 1
                if tie is not None:  # compare up to the tie only
                    if got[:tie] != want[:tie]:
                        print(f"{path} prompt {i}: {got[:tie]} differs from transformers' {want[:tie]} before a tie")
                        failures += 1
                    continue
                reason = "eod" if stopped else "length"
                if got != want or r["finish_reason"] != reason:
                    print(f"{path} prompt {i}: meg {got} ({r['finish_reason']}), transformers {want} ({reason})")
                    failures += 1
        print(f"{name}: {len(prompts)} prompts, greedy completions compared on "
              f"{len(glob.glob(os.path.join(os.path.dirname(model_dir), 'meg-*.jsonl')))} device(s)")
    print(f"{checked} completions checked, {failures} failed")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "prompts":
        write_prompts(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2]))
    else:
        sys.exit(__doc__)
