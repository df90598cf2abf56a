# Hugging Face tokenizer.json through the whole pipeline: meg-tokenize's ids equal Hugging Face's
# (with and without the post-processor's special tokens), decoding, a model directory as
# --tokenizer, Megatron's --tokenizer-type, training with it (the checkpoint keeps tokenizer.json),
# generating, export and import, and bad files refused in one line naming the file and the place.
source "$(dirname "$0")/lib.sh"
H=$MEG_TEST_DATA/hf-tokenizers

# ids_of PREFIX: the ids of dataset PREFIX (.bin of uint16), one line.
ids_of() { python3 -c "import sys, array; a = array.array('H'); a.frombytes(open('$1.bin', 'rb').read()); print(list(a))"; }
# expected FAMILY KEY [EOD]: Hugging Face's ids (KEY ids or ids_special) of the non-empty texts,
# each followed by EOD when given.
expected() {
  python3 - "$H" "$1" "$2" "${3:-}" <<'PY'
import json, sys
h, family, key, eod = sys.argv[1:]
texts = [json.loads(l)["text"] for l in open(f"{h}/texts.jsonl")]
want = [json.loads(l)[key] for l in open(f"{h}/{family}/expected.jsonl")]
out = []
for t, ids in zip(texts, want):
    if t.strip():
        out += ids + ([int(eod)] if eod else [])
print(out)
PY
}
python3 -c "import json; [print(json.dumps({'text': json.loads(l)['text']})) for l in open('$H/texts.jsonl') if json.loads(l)['text'].strip()]" > texts.jsonl

# (1) The ids of each family, as Hugging Face's encode gives them (add_special_tokens by default).
for family in gpt2 llama3 qwen2 neox tekken spm metaspace wordpiece; do
  T=$H/$family/tokenizer.json
  meg-tokenize -q --tokenizer $T texts.jsonl | meg-index -q -o $family
  [ "$(ids_of $family)" = "$(expected $family ids_special)" ] || fail "$family: meg-tokenize's ids differ from Hugging Face's"
  meg-tokenize -q --tokenizer $T --no-add-special-tokens texts.jsonl | meg-index -q -o $family-plain
  [ "$(ids_of $family-plain)" = "$(expected $family ids)" ] || fail "$family: --no-add-special-tokens"
done
# The end of a document is the tokenizer's own (<|end_of_text|> for Llama 3's, id 1).
meg-tokenize -q --tokenizer $H/llama3/tokenizer.json --append-eod texts.jsonl | meg-index -q -o eod
[ "$(ids_of eod)" = "$(expected llama3 ids_special 1)" ] || fail "--append-eod with Llama 3's tokenizer.json"

# (2) Decoding gives the documents back, without the special tokens around them.
meg-tokenize -q --tokenizer $H/llama3/tokenizer.json texts.jsonl > l.tok
meg-tokenize -q --tokenizer $H/llama3/tokenizer.json --decode l.tok > decoded.jsonl
cmp -s decoded.jsonl <(python3 -c "import json; [print(json.dumps(json.loads(l), ensure_ascii=False, separators=(',', ':'))) for l in open('texts.jsonl')]") ||
  fail "decode(encode(text)) != text: $(diff decoded.jsonl texts.jsonl | head -5)"

# (3) A model directory names its tokenizer.json; --tokenizer-type is checked against the file.
mkdir -p model && cp $H/qwen2/tokenizer.json model/
meg-tokenize -q --tokenizer model texts.jsonl | meg-index -q -o dir
same_file dir.bin qwen2.bin
meg-tokenize -q --tokenizer-type HuggingFaceTokenizer --tokenizer-model model texts.jsonl > /dev/null
expect_fail 1 "^meg-tokenize: --tokenizer-type GPT2BPETokenizer: --tokenizer model is a Hugging Face tokenizer.json$" -- \
  meg-tokenize --tokenizer-type GPT2BPETokenizer --tokenizer model texts.jsonl
expect_fail 1 "^meg-tokenize: --tokenizer-type NullTokenizer: not a kind meg reads" -- \
  meg-tokenize --tokenizer-type NullTokenizer --tokenizer model texts.jsonl
# tokenizer_config.json beside it names the end of a document.
printf '{"eos_token": {"content": "<|im_end|>"}}' > model/tokenizer_config.json
printf '{"text": "a"}\n' | meg-tokenize -q --tokenizer model --append-eod | meg-index -q -o im_end
[ "$(ids_of im_end | tr -d '[] ' | cut -d, -f2)" = 2 ] || fail "eos_token of tokenizer_config.json: $(ids_of im_end)"

# (4) Training with it: the checkpoint keeps tokenizer.json (and tokenizer_config.json), so that
# meg-generate and a resumed run need no --tokenizer.
for _ in 1 2 3 4 5 6 7 8; do cat texts.jsonl; done > many.jsonl
meg-tokenize -q --tokenizer model --append-eod many.jsonl | meg-index -q -o train
meg-blend -q --seq-length 16 --samples 64 -o train.blend 1 train 2>/dev/null
meg-pretrain -q --device cpu --model tiny-llama --tokenizer model --data train.blend --micro-batch 2 \
  --lr 1e-3 --iters 2 --save ck
[ -f ck/iter_0000002/tokenizer.json ] && [ -f ck/iter_0000002/tokenizer_config.json ] ||
  fail "the checkpoint does not keep the tokenizer: $(ls ck/iter_0000002)"
meg-generate -q --device cpu --load ck --prompt "Hello" --max-tokens 3 > gen.txt || fail "meg-generate with tokenizer.json"
meg-pretrain -q --device cpu --load ck --save ck --iters 3 || fail "resuming without --tokenizer"
# Exported, the folder holds the tokenizer.json and its settings; imported again, the checkpoint
# keeps them.
meg-ckpt-convert -q --load ck --to hf --save hf
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do [ -f hf/$f ] || fail "the export lacks $f: $(ls hf)"; done
same_file hf/tokenizer.json model/tokenizer.json
grep -q '"eos_token": "<|im_end|>"' hf/special_tokens_map.json || fail "special_tokens_map.json: $(cat hf/special_tokens_map.json)"
grep -q '"eos_token_id": 2' hf/config.json || fail "config.json's eos_token_id: $(cat hf/config.json)"
meg-ckpt-convert -q --from hf hf --save back
same_file back/iter_0000000/tokenizer.json model/tokenizer.json

# (5) Bad files: one line naming the file and the place, exit 1.
python3 - $H/llama3/tokenizer.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bad = dict(j); bad["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(?<=x)y"}, "behavior": "Isolated"}
json.dump(bad, open("lookbehind.json", "w"))
bad = dict(j); bad["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": ""}
json.dump(bad, open("precompiled.json", "w"))
bad = dict(j); bad["model"] = dict(j["model"], merges=j["model"]["merges"] + [["x", "nosuch"]])
json.dump(bad, open("merge.json", "w"))
open("truncated.json", "w").write(json.dumps(j)[:5000])
PY
expect_fail 1 "^meg-tokenize: lookbehind.json: pre_tokenizer.pattern: regex .*lookbehind" -- meg-tokenize --tokenizer lookbehind.json texts.jsonl
expect_fail 1 "^meg-tokenize: precompiled.json: normalizer: normalizer type \"Precompiled\" is not supported" -- \
  meg-tokenize --tokenizer precompiled.json texts.jsonl
expect_fail 1 "^meg-tokenize: merge.json: model: merges\[[0-9]+\]: token \"nosuch\" is not in the vocabulary$" -- \
  meg-tokenize --tokenizer merge.json texts.jsonl
expect_fail 1 "^meg-tokenize: truncated.json:1:[0-9]+: not valid JSON" -- meg-tokenize --tokenizer truncated.json texts.jsonl
echo "tokenizer.json: all tests passed"
