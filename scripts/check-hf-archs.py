#!/usr/bin/env python3
"""Writes small random Hugging Face models of the architectures meg imports, with transformers.

    python3 scripts/check-hf-archs.py OUT TOKENIZER_MODEL

For each architecture, OUT/NAME/hf/ holds what save_pretrained writes for a model of that class
(fp32, the tokenizer's bos and eos, random weights: transformers' initialisation, then every parameter moved by noise so that
norm weights and biases are not ones and zeros) and TOKENIZER_MODEL (a SentencePiece model whose
vocabulary the models share) as tokenizer.model:
  llama3       LlamaForCausalLM, rope_scaling llama3 (original positions 16, below the 64 used)
  linear       LlamaForCausalLM, rope_scaling linear (factor 2)
  llama-bias   LlamaForCausalLM, attention_bias and mlp_bias, head_dim 32 on a stream of 64
  qwen2        Qwen2ForCausalLM (q/k/v biases), tied embeddings, rope_theta 1e6
  qwen3        Qwen3ForCausalLM (q_norm, k_norm), head_dim 32
  mistral      MistralForCausalLM, sliding_window null, head_dim 32
  mistral-window  MistralForCausalLM, sliding_window 8 of the 64 positions (meg's window-size 7,0):
               the scores and the greedy completions (prompt and 40 tokens) cross the window
An architecture this transformers lacks (Qwen3 before 4.51) is skipped with a line saying so.
scripts/check-hf-archs.sh then imports each into meg, scores with meg-eval, and has
scripts/check-hf-eval.py compare the scores with transformers' on these files and on meg's export.
"""
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sentencepiece  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402


def architectures(vocab, bos, eos):
    common = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                  rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.05)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    return [
        ("llama3", "LlamaConfig", dict(common, rope_scaling=llama3)),
        ("linear", "LlamaConfig", dict(common, rope_scaling={"rope_type": "linear", "factor": 2.0})),
        ("llama-bias", "LlamaConfig", dict(common, attention_bias=True, mlp_bias=True, head_dim=32)),
        ("qwen2", "Qwen2Config", dict(common, rope_theta=1000000.0, tie_word_embeddings=True,
                                      use_sliding_window=False)),
        ("qwen3", "Qwen3Config", dict(common, head_dim=32, attention_bias=False, use_sliding_window=False)),
        ("mistral", "MistralConfig", dict(common, head_dim=32, sliding_window=None)),
        ("mistral-window", "MistralConfig", dict(common, head_dim=32, sliding_window=8)),
    ]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out, spm_model = sys.argv[1], sys.argv[2]
    sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    torch.manual_seed(0)
    # The tokenizer's bos and eos, as meg takes them from it: generate() stops where meg-generate does.
    for name, config_class, kwargs in architectures(sp.get_piece_size(), sp.bos_id(), sp.eos_id()):
        if not hasattr(transformers, config_class):
            print(f"{name}: skipped, transformers {transformers.__version__} has no {config_class}")
            continue
        config = getattr(transformers, config_class)(**kwargs)
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.02 * torch.randn_like(p))
        hf = os.path.join(out, name, "hf")
        model.save_pretrained(hf, safe_serialization=True)
        shutil.copy(spm_model, os.path.join(hf, "tokenizer.model"))
        print(f"{name}: {type(model).__name__} in {hf}")


if __name__ == "__main__":
    main()
