# Hugging Face architectures beyond GPT-2 and Llama 2: for each of LlamaForCausalLM with Llama 3.1's
# rope_scaling and with linear scaling, Qwen2ForCausalLM (q/k/v biases, tied embeddings),
# Qwen3ForCausalLM (q_norm/k_norm, head_dim 16 on a stream of 32) and MistralForCausalLM (a
# sliding window covering the positions, and one of 8 of its 64), a small random checkpoint written by
# hf_random_model.py is imported and exported again unchanged, trained 2 steps under tensor
# parallelism (tp 2, mpirun), evaluated and generated from; native -> hf -> native gives the same
# parameters bit for bit. Configs meg cannot compute exactly are refused with one line.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
HERE=$(dirname "$0")
meg-blend -q --seq-length 64 --samples 100 -o run.blend 1 $M/fortunes_spm
convert() { meg-ckpt-convert -q "$@"; }
# same_tensors A B [padded]: two safetensors files hold the same tensors (names, shapes, bytes), in
# any order; with "padded", B's vocabulary rows beyond the real 2100 (not exported) may be zero.
same_tensors() {
  python3 - "$1" "$2" "${3:-}" <<'PY' || fail "tensors of $1 and $2 differ"
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), a.keys() ^ b.keys()
for k in a:
    if a[k] != b[k] and sys.argv[3] == "padded":
        (dtype, shape, x), (_, _, y) = a[k], b[k]
        real = 2100 * shape[1] * 4
        assert k.endswith(("word_embeddings.weight", "output_layer.weight")), k
        assert x[:real] == y[:real] and y[real:] == bytes(len(y) - real), k
    else:
        assert a[k] == b[k], k
PY
}
for arch in llama3 linear qwen2 qwen3 mistral mistral-window; do
  python3 $HERE/hf_random_model.py $arch $arch
  convert --from hf $arch --save $arch.meg --tp 2 --verify  # padded for tp 2
  # Exported again: the same tensors; the architecture its features make (Mistral's without a
  # window smaller than its positions is a Llama).
  convert --load $arch.meg --to hf --save $arch.hf --verify
  same_tensors $arch/model.safetensors $arch.hf/model.safetensors
  expected=$(python3 -c "import json; print(json.load(open('$arch/config.json'))['architectures'][0])")
  [ $arch = mistral ] && expected=LlamaForCausalLM
  grep -q "\"$expected\"" $arch.hf/config.json || fail "$arch.hf/config.json: $(cat $arch.hf/config.json)"
  python3 - $arch/config.json $arch.hf/config.json <<'PY' || fail "$arch: the exported config differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
scaling = a.get("rope_scaling")
if a["architectures"] == b["architectures"] == ["MistralForCausalLM"]:
    assert a["sliding_window"] == b["sliding_window"], (a["sliding_window"], b["sliding_window"])
if scaling and "type" in scaling: scaling["rope_type"] = scaling.pop("type")
for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "vocab_size"):
    assert a[key] == b[key], (key, a[key], b[key])
assert scaling == b.get("rope_scaling"), (scaling, b.get("rope_scaling"))
if "head_dim" in a: assert a["head_dim"] == b["head_dim"]
PY
  # Two steps under tensor parallelism, then native -> hf -> native.
  rm -f $arch.jsonl
  mpi 2 meg-pretrain -q --device cpu --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 2 \
    --global-batch 4 --lr 3e-3 --log-interval 1 --iters 2 --tp 2 --load $arch.meg --save $arch.tp2 \
    --metrics $arch.jsonl
  [ "$(grep -c '"loss"' $arch.jsonl)" -eq 2 ] || fail "$arch training: $(cat $arch.jsonl)"
  convert --load $arch.tp2 --to hf --save $arch.hf2 --verify
  convert --from hf $arch.hf2 --save $arch.back --verify
  convert --load $arch.tp2 --save $arch.tp1 --tp 1
  same_tensors $arch.tp1/iter_0000002/model.safetensors $arch.back/iter_0000000/model.safetensors padded
  convert --load $arch.back --to hf --save $arch.hf3
  same_file $arch.hf2/model.safetensors $arch.hf3/model.safetensors
  same_file $arch.hf2/config.json $arch.hf3/config.json
  # Evaluated and generated from like the others.
  meg-generate -q --device cpu --load $arch.back --tokenizer $M/fortunes_spm.model --prompt "The" --max-tokens 4 \
    > $arch.txt || fail "generating from $arch.back"
  meg-eval -q --device cpu --load $arch.back --tokenizer $M/fortunes_spm.model --task $MEG_TEST_DATA/eval/text.jsonl \
    --task-type perplexity --json > $arch.eval.json || fail "evaluating $arch.back"
done

# Refused with one line naming the file and the key.
python3 $HERE/hf_random_model.py llama3 dyn 'rope_scaling={"rope_type":"dynamic","factor":2.0}'
expect_fail 1 "dyn/config.json: key 'rope_scaling': .*dynamic.* is not supported" -- convert --from hf dyn --save x
python3 $HERE/hf_random_model.py llama3 yarn 'rope_scaling={"rope_type":"yarn","factor":2.0}'
expect_fail 1 "yarn/config.json: key 'rope_scaling': .*yarn.* is not supported" -- convert --from hf yarn --save x
python3 $HERE/hf_random_model.py llama3 half 'rope_scaling={"rope_type":"llama3","factor":8.0}'
expect_fail 1 "half/config.json: key 'rope_scaling': rope_type \"llama3\" needs key 'low_freq_factor'" -- \
  convert --from hf half --save x
python3 $HERE/hf_random_model.py qwen2 window use_sliding_window=true sliding_window=8 max_window_layers=1
expect_fail 1 "window/config.json: key 'max_window_layers': 1 is not supported \(meg's attention layers share one window" \
  -- convert --from hf window --save x
python3 $HERE/hf_random_model.py qwen3 bias attention_bias=true
expect_fail 1 "bias/config.json: key 'attention_bias': true is not supported" -- convert --from hf bias --save x
python3 $HERE/hf_random_model.py qwen3 falcon 'model_type="falcon"'
expect_fail 1 "falcon/config.json: key 'model_type': unknown architecture \"falcon\"" -- convert --from hf falcon --save x
# Shapes that do not match the config: Qwen3's heads of 16 read as heads of 8.
python3 $HERE/hf_random_model.py qwen3 shapes head_dim=8
expect_fail 1 "shapes/model.safetensors: tensor model.layers.0.self_attn.q_proj.weight has shape" -- \
  convert --from hf shapes --save x
no_file x
