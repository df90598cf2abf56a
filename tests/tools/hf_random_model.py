# Writes a small Hugging Face checkpoint of one architecture with random float32 weights, as
# transformers' save_pretrained lays it out: DIR/config.json and DIR/model.safetensors.
#   python3 hf_random_model.py ARCH DIR [KEY=JSON ...]
# ARCH: llama3 (LlamaForCausalLM with Llama 3.1's rope_scaling), linear (Llama, linear scaling),
# qwen2 (q/k/v biases), qwen3 (q_norm/k_norm, head_dim 16 on a stream of 32), mistral (a sliding
# window that covers the positions), mistral-window (sliding_window 8 of the 64 positions).
# KEY=JSON pairs override config.json's keys (a bad file).
import json, random, struct, sys

arch, out = sys.argv[1], sys.argv[2]
V, C, L, NH, NKV, F, P = 2100, 32, 2, 4, 2, 64, 64
config = {"vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": NH,
          "num_key_value_heads": NKV, "intermediate_size": F, "max_position_embeddings": P,
          "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "initializer_range": 0.02, "attention_dropout": 0.0, "torch_dtype": "float32"}
HS = C // NH
if arch in ("llama3", "linear"):
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, mlp_bias=False,
                  head_dim=HS)
    config["rope_scaling"] = ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
                              if arch == "llama3" else {"type": "linear", "factor": 2.0})
elif arch == "qwen2":
    config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_theta=1000000.0,
                  use_sliding_window=False, sliding_window=None, max_window_layers=L, tie_word_embeddings=True)
elif arch == "qwen3":
    HS = 16
    config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=HS, attention_bias=False,
                  use_sliding_window=False, sliding_window=None, max_window_layers=L)
elif arch in ("mistral", "mistral-window"):
    config.update(architectures=["MistralForCausalLM"], model_type="mistral", head_dim=HS,
                  sliding_window=P if arch == "mistral" else 8)
else:
    sys.exit("unknown architecture " + arch)
for pair in sys.argv[3:]:
    key, value = pair.split("=", 1)
    config[key] = json.loads(value)

rng = random.Random(arch)
tensors = {}
def add(name, shape):  # norm weights too are random: ones would hide one misplaced
    n = 1
    for d in shape: n *= d
    tensors[name] = (shape, [rng.gauss(0, 0.05) for _ in range(n)])
add("model.embed_tokens.weight", [V, C])
for i in range(L):
    p = "model.layers.%d." % i
    for proj, rows in (("q_proj", NH * HS), ("k_proj", NKV * HS), ("v_proj", NKV * HS)):
        add(p + "self_attn." + proj + ".weight", [rows, C])
        if arch == "qwen2": add(p + "self_attn." + proj + ".bias", [rows])
    add(p + "self_attn.o_proj.weight", [C, NH * HS])
    if arch == "qwen3":
        add(p + "self_attn.q_norm.weight", [HS])
        add(p + "self_attn.k_norm.weight", [HS])
    add(p + "mlp.gate_proj.weight", [F, C])
    add(p + "mlp.up_proj.weight", [F, C])
    add(p + "mlp.down_proj.weight", [C, F])
    add(p + "input_layernorm.weight", [C])
    add(p + "post_attention_layernorm.weight", [C])
add("model.norm.weight", [C])
if not config["tie_word_embeddings"]: add("lm_head.weight", [V, C])

import os
os.makedirs(out, exist_ok=True)
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2, sort_keys=True)
header, offset, blobs = {}, 0, []
for name, (shape, values) in tensors.items():
    blob = struct.pack("<%df" % len(values), *values)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
    offset += len(blob)
    blobs.append(blob)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
