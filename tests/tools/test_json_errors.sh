# Every JSON a tool reads (JSONL documents, eval tasks, prompts, settings, checkpoint.json, a
# Hugging Face config.json, a safetensors header): a number that overflows, a malformed text or a
# field of the wrong type is one line naming the file and the place, exit 1; never an internal error.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
CK=$MEG_TEST_DATA/checkpoints
cp $M/fortunes_spm.model .  # the checkpoints record the tokenizer by this relative name

# --- JSONL documents (the issue's reproduction) and settings files.
printf '{"text": "a", "x": 1e99999}\n' > h.jsonl
expect_fail 1 "^meg-tokenize: h.jsonl:1:20: number 1e99999 is out of range$" -- \
  meg-tokenize --tokenizer fortunes_spm.model h.jsonl -o out.tok
no_file out.tok
expect_fail 1 "^meg-tokenize: h.jsonl:1:20: number 1e99999 is out of range$" -- \
  meg-tokenize --tokenizer fortunes_spm.model h.jsonl
printf '{\n  "quiet": true,\n  "workers": 1e400\n}\n' > settings.json
expect_fail 1 "^meg-tokenize: settings.json:3:14: number 1e400 is out of range$" -- \
  meg-tokenize --config settings.json --tokenizer fortunes_spm.model h.jsonl
printf '[1]\n' > settings.json
expect_fail 1 "^meg-tokenize: settings.json: a settings file holds a JSON object, not array$" -- \
  meg-tokenize --config settings.json --tokenizer fortunes_spm.model h.jsonl

# --- Eval task files.
printf '{"text": "a b"}\n{"text": "a b", "x": 1e99999}\n' > task.jsonl
expect_fail 1 "^meg-eval: task.jsonl:2:22: number 1e99999 is out of range$" -- \
  meg-eval -q --load $CK/gpt --task task.jsonl --task-type lambada
printf '{"query": "Q", "choices": ["a", "b"], "gold": 1.5}\n' > task.jsonl
expect_fail 1 "^meg-eval: task.jsonl:1: \"gold\" is 1.5, not a choice number$" -- \
  meg-eval -q --load $CK/gpt --task task.jsonl --task-type multiple-choice
printf '{"query": "Q", "choices": ["a", "b"], "gold": 18446744073709551615}\n' > task.jsonl
expect_fail 1 "^meg-eval: task.jsonl:1: \"gold\" must be an integer from .* not 18446744073709551615$" -- \
  meg-eval -q --load $CK/gpt --task task.jsonl --task-type multiple-choice

# --- Prompt files.
printf '{"prompt": "x"}\n{"prompt": "x", "temperature": 1e400}\n' > prompts.jsonl
expect_fail 1 "^meg-generate: prompts.jsonl:2:32: number 1e400 is out of range$" -- \
  meg-generate -q --load $CK/gpt --prompts prompts.jsonl
printf '{"prompt": "x", "top_p": [1]}\n' > prompts.jsonl
expect_fail 1 "^meg-generate: prompts.jsonl:1: \"top_p\" must be a number, not array$" -- \
  meg-generate -q --load $CK/gpt --prompts prompts.jsonl

# --- checkpoint.json: an overflowed number, and a field of the wrong type.
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])), indent=1))" \
  $CK/gpt/checkpoint.json > record.json
grep -q '^   "hidden-size": 32,$' record.json || fail "record.json should hold the hidden size on a line of its own"
line=$(grep -n '"hidden-size"' record.json | cut -d: -f1)
cp -r $CK/gpt ck
sed 's/"hidden-size": 32,/"hidden-size": 1e400,/' record.json > ck/checkpoint.json
expect_fail 1 "^meg-generate: ck/checkpoint.json:$line:19: number 1e400 is out of range$" -- \
  meg-generate -q --load ck --prompt x
sed 's/"hidden-size": 32,/"hidden-size": "32",/' record.json > ck/checkpoint.json
expect_fail 1 "^meg-generate: ck/checkpoint.json: key 'hidden-size' must be an integer, not string$" -- \
  meg-generate -q --load ck --prompt x
expect_fail 1 "^meg-ckpt-convert: ck/checkpoint.json: key 'hidden-size' must be an integer, not string$" -- \
  meg-ckpt-convert -q --load ck --save out
no_file out

# --- A Hugging Face config.json and a safetensors header.
cp -r $CK/gpt-hf hf
sed 's/"n_embd": [0-9]*/"n_embd": 1e400/' $CK/gpt-hf/config.json > hf/config.json
line=$(grep -n '"n_embd"' hf/config.json | cut -d: -f1)
expect_fail 1 "^meg-ckpt-convert: hf/config.json:$line:13: number 1e400 is out of range$" -- \
  meg-ckpt-convert -q --from hf hf --save out
sed 's/"n_embd": [0-9]*/"n_embd": "wide"/' $CK/gpt-hf/config.json > hf/config.json
expect_fail 1 "^meg-ckpt-convert: hf/config.json: key 'n_embd' must be an integer, not string$" -- \
  meg-ckpt-convert -q --from hf hf --save out
cp $CK/gpt-hf/config.json hf/config.json
# The first shape's first size replaced by VALUE, the header length fixed up.
header_with() {
  python3 - "$CK/gpt-hf/model.safetensors" hf/model.safetensors "$1" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
first = next(k for k in header if k != "__metadata__")
header[first]["shape"][0] = "@"
text = json.dumps(header).replace('"@"', sys.argv[3]).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
print(8 + text.find(sys.argv[3].encode()))
PY
}
at=$(header_with 1e400)
expect_fail 1 "^meg-ckpt-convert: hf/model.safetensors: byte $at: number 1e400 is out of range$" -- \
  meg-ckpt-convert -q --from hf hf --save out
header_with '"x"' > /dev/null
expect_fail 1 "^meg-ckpt-convert: hf/model.safetensors: tensor .*: shape holds string, not a non-negative integer$" -- \
  meg-ckpt-convert -q --from hf hf --save out
no_file out
