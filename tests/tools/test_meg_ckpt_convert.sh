# meg-ckpt-convert between native layouts: round trips back to the original layout give the same
# bytes (GPT with its tied embedding, Llama untied; tensor and pipeline parallelism, virtual stages,
# the distributed optimizer's uneven shards; a vocabulary re-padded for tp 2 and back); training
# resumes from a resharded checkpoint as from one the trainer wrote in that layout (exactly) and
# within 1e-5 of the run that never stopped; --verify; bad input and layouts that do not divide are
# refused with one line and nothing written; the input is never modified. Hugging Face interchange
# (--to hf, --from hf): native to hf to native gives the same parameters bit for bit (the vocabulary
# padding rows aside, which are not exported), from any layout; bf16 exports verify; an import
# written in tp 2 pp 2 exports the same bytes again; shards with an index; bad hf input refused.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 32 --samples 400 -o run.blend 1 $M/fortunes_spm
BASE="meg-pretrain -q --device cpu --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 2 --lr 3e-3
      --warmup-iters 2 --log-interval 1 --iters 6 --num-layers 4"
RUN="$BASE --global-batch 8"
convert() { meg-ckpt-convert -q "$@"; }
# same_checkpoint A B: the same files, byte for byte, and the same record.
same_checkpoint() {
  [ "$(cd $1 && ls *.safetensors)" = "$(cd $2 && ls *.safetensors)" ] || fail "$1 and $2 hold other files"
  for f in $1/*.safetensors; do same_file $f $2/${f##*/}; done
  python3 - $1/checkpoint.json $2/checkpoint.json <<'PY' || fail "records of $1 and $2 differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["record"] == b["record"] and a["iteration"] == b["iteration"], (a["record"], b["record"])
PY
}
fingerprint() { (cd $1 && find . -type f | sort | xargs md5sum); }

# Round trips from one process's checkpoint at iteration 3, the vocabulary (2100 -> 2176 rows for tp
# 1) re-padded to 2304 rows for tp 2 and cut back.
for model in tiny tiny-llama; do
  $RUN --model $model --vocab-size 2100 --save $model --save-interval 3 2>/dev/null
  A=$model/iter_0000003
  fingerprint $A > before.md5
  for layout in "--tp 2 --pp 2 --dp 2 --use-distributed-optimizer" "--tp 2 --pp 2 --virtual-stages 2" \
                "--dp 3 --use-distributed-optimizer" "--pp 4"; do
    rm -rf b back
    convert --load $A --save b $layout --verify
    convert --load b --save back --verify
    same_checkpoint $A back/iter_0000003
  done
  fingerprint $A | cmp -s - before.md5 || fail "the input $A was modified"
  # Sharded to sharded: every reader and writer path, then back.
  rm -rf b c back
  convert --load $A --save b --tp 2 --pp 2 --virtual-stages 2 --dp 2 --use-distributed-optimizer
  python3 -c "
import json; r = json.load(open('b/iter_0000003/checkpoint.json'))['record']
assert r['parallel'] == {'tp': 2, 'pp': 2, 'dp': 2, 'cp': 1, 'ep': 1, 'virtual_stages': 2}, r['parallel']
assert r['sharded'] and r['distributed_optimizer'] and r['model']['padded-vocab-size'] == 2304, r" ||
    fail "the record of b does not describe its layout"
  for f in model-tp01-pp01 optimizer-tp01-pp01-dp01; do
    [ -f b/iter_0000003/$f.safetensors ] || fail "b/iter_0000003/$f.safetensors missing: $(ls b/iter_0000003)"
  done
  convert --load b --save c --pp 4 --dp 3 --use-distributed-optimizer --verify
  convert --load c/iter_0000003 --save back
  same_checkpoint $A back/iter_0000003
done

# Resuming. The vocabulary of the tokenizer (2000) pads to 2048 rows for tp 1, 2 and 4, so the
# trainer also loads the one-process checkpoint in another layout itself: a resharded checkpoint
# must resume exactly as that does. Either stays within 1e-5 of the run that never stopped (the
# layouts sum in other orders).
$RUN --model tiny --save one --save-interval 3 --metrics straight.jsonl 2>/dev/null
losses straight.jsonl | tail -3 > straight.loss
for layout in "4 --tp 2 --pp 2" "4 --pp 2 --virtual-stages 2 --dp 2 --use-distributed-optimizer"; do
  rm -rf r direct
  convert --load one/iter_0000003 --save r ${layout#* }
  mpi ${layout%% *} $RUN --model tiny ${layout#* } --load r --save r --save-interval 6 2>/dev/null
  mkdir direct
  mpi ${layout%% *} $RUN --model tiny ${layout#* } --load one/iter_0000003 --metrics direct/metrics.jsonl 2>/dev/null
  losses r/metrics.jsonl > resumed.loss
  losses direct/metrics.jsonl > direct.loss
  same_file direct.loss resumed.loss
  losses_close straight.loss resumed.loss 1e-5
done
# The other way: trained in a layout, resharded for one process, which continues within 1e-5 and
# exactly as it does from the sharded checkpoint itself.
$RUN --model tiny --vocab-size 2100 --metrics straight2.jsonl 2>/dev/null
losses straight2.jsonl | tail -3 > straight2.loss
mpi 4 $RUN --model tiny --vocab-size 2100 --tp 2 --pp 2 --save s --exit-interval 3 2>/dev/null
convert --load s --save s1 --verify
$RUN --model tiny --vocab-size 2100 --load s1 --save s1 2>/dev/null
losses s1/metrics.jsonl > resumed.loss
losses_close straight2.loss resumed.loss 1e-5
# The trainer's own shards of the distributed optimizer over 3 ranks (uneven, the last one padded
# with zeros) go to one process and back byte for byte.
mpi 3 $BASE --model tiny --global-batch 6 --use-distributed-optimizer --save z --exit-interval 2 2>/dev/null
convert --load z --save z1
convert --load z1 --save z3 --dp 3 --use-distributed-optimizer
same_checkpoint z/iter_0000002 z3/iter_0000002

# Bad input: one line, exit 1, nothing written; the input untouched.
S=s/iter_0000003
expect_fail 1 "--tp 3: the model's attention heads \(4\) do not divide over 3 ranks" -- convert --load $S --save out --tp 3
no_file out
expect_fail 1 "--pp 3: the model's 4 blocks do not divide over 3 stages" -- convert --load $S --save out --pp 3
expect_fail 1 "--pp 2 --virtual-stages 4: the model's 4 blocks do not divide over 2 x 4 virtual stages" -- \
  convert --load $S --save out --pp 2 --virtual-stages 4
expect_fail 1 "--virtual-stages needs --pp above 1" -- convert --load $S --save out --virtual-stages 2
expect_fail 1 "--cp 2: context parallelism is not supported" -- convert --load $S --save out --cp 2
expect_fail 1 "--ep 2: expert parallelism is not supported" -- convert --load $S --save out --ep 2
expect_fail 1 "--tp 0 must be at least 1" -- convert --load $S --save out --tp 0
expect_fail 1 "--save DIR is required" -- convert --load $S
expect_fail 1 "nothere: no such checkpoint directory" -- convert --load nothere --save out
no_file out
expect_fail 1 "iter_0000003: checkpoint of iteration 3 already exists; refusing to overwrite it" -- \
  convert --load $S --save s1
# A conversion killed after its rename and before `latest`: run again, it finishes (same record,
# files checked); one of another layout into that directory, or a finished one run again, is refused.
rm -rf k && convert --load $S --save k --tp 2 && fingerprint k/iter_0000003 > k.md5 && rm k/latest
meg-ckpt-convert --load $S --save k --tp 2 2>k.log || fail "the interrupted conversion run again: $(cat k.log)"
grep -q "k/iter_0000003: the same conversion was interrupted before it named its checkpoint .latest.; finished it" k.log ||
  fail "no word of finishing it: $(cat k.log)"
[ "$(cat k/latest)" = iter_0000003 ] && fingerprint k/iter_0000003 | cmp -s - k.md5 || fail "k after finishing it"
rm k/latest
expect_fail 1 "k/iter_0000003: checkpoint of iteration 3 already exists; refusing to overwrite it" -- \
  convert --load $S --save k --pp 2
echo iter_0000003 > k/latest  # a finished conversion: run again, refused
expect_fail 1 "k/iter_0000003: checkpoint of iteration 3 already exists; refusing to overwrite it" -- \
  convert --load $S --save k --tp 2
expect_fail 1 "inside the input being read" -- convert --load $S --save $S/out
cp -r s bad
python3 - bad/iter_0000003/model-tp01-pp01.safetensors <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 1]))
PY
expect_fail 1 "model-tp01-pp01.safetensors: checksum mismatch" -- convert --load bad --save out
no_file out
rm -rf bad && cp -r s bad
truncate -s -8 bad/iter_0000003/optimizer-tp00-pp01.safetensors
expect_fail 1 "optimizer-tp00-pp01.safetensors: truncated" -- convert --load bad --save out
no_file out
# Shards that do not match the record: it claims tp 1, then tp 4, where the files hold tp 2.
rm -rf bad && cp -r s bad
python3 - bad/iter_0000003/checkpoint.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["record"]["parallel"]["tp"] = 1
json.dump(j, open(sys.argv[1], "w"))
PY
expect_fail 1 "does not belong to the recorded layout \(tp 1, pp 2, dp 1\)" -- convert --load bad --save out
no_file out
python3 - bad/iter_0000003/checkpoint.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["record"]["parallel"]["tp"] = 4
json.dump(j, open(sys.argv[1], "w"))
PY
expect_fail 1 "model-tp00-pp00.safetensors: tensor .* has shape .*, expected" -- convert --load bad --save out
no_file out
# Hugging Face. same_params A B V: the model.safetensors of checkpoints A and B hold the same
# tensors bit for bit, except that B's vocabulary rows from V on (padding, not exported) are zero.
same_params() {
  python3 - $1/model.safetensors $2/model.safetensors $3 <<'PY' || fail "parameters of $1 and $2 differ"
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items()}
a, b, vocab = tensors(sys.argv[1]), tensors(sys.argv[2]), int(sys.argv[3])
assert a.keys() == b.keys(), a.keys() ^ b.keys()
for name, ((shape_a, x), (shape_b, y)) in zip(a, ((a[k], b[k]) for k in a)):
    assert shape_a == shape_b, (name, shape_a, shape_b)
    if x != y:
        real = vocab * shape_a[1] * 4
        assert name.endswith(("word_embeddings.weight", "output_layer.weight")), name
        assert x[:real] == y[:real] and y[real:] == bytes(len(y) - real), name
PY
}
for model in tiny tiny-llama; do
  A=$model/iter_0000003
  fingerprint $A > before.md5
  rm -rf hf back i22 hf22 bf16
  convert --load $A --to hf --save hf --verify  # with the tokenizer the checkpoint keeps
  [ "$(ls hf | tr '\n' ' ')" = "config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.model tokenizer_config.json " ] ||
    fail "hf holds $(ls hf)"
  same_file hf/tokenizer.model $M/fortunes_spm.model
  python3 - hf <<'PY' || fail "the tokenizer settings of the export: $(cat hf/tokenizer_config.json hf/config.json)"
import json, sys
tc, st, c = (json.load(open(f"{sys.argv[1]}/{n}")) for n in ("tokenizer_config.json", "special_tokens_map.json", "config.json"))
assert tc["tokenizer_class"] == "LlamaTokenizer" and tc["eos_token"] == "</s>" and tc["unk_token"] == "<unk>", tc
assert tc["add_bos_token"] is False and tc["add_eos_token"] is False and tc["model_max_length"] == c.get("n_positions", c.get("max_position_embeddings")), tc
assert st == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, st
assert c["eos_token_id"] == 2 and c["bos_token_id"] == 1, c
PY
  convert --from hf hf --save back --verify
  same_params $A back/iter_0000000 2100
  python3 -c "
import json; r = json.load(open('back/iter_0000000/checkpoint.json'))['record']
assert r['iteration'] == 0 and r['optimizer_step'] == 0 and r['model']['padded-vocab-size'] == 2176, r
assert 'blend_fingerprint' not in r and r['imported_from']['format'] == 'hf', r" ||
    fail "the record of the import is not a fresh start's"
  # Training starts from the imported weights, a checkpoint without a data position to continue;
  # without --model or --model-config the model is the checkpoint's.
  rm -f imported.jsonl
  meg-pretrain -q --device cpu --data run.blend --tokenizer $M/fortunes_spm.model --micro-batch 2 --global-batch 8 \
    --lr 3e-3 --log-interval 1 --iters 2 --load back --metrics imported.jsonl
  [ "$(grep -c '"loss"' imported.jsonl)" -eq 2 ] || fail "training from the import: $(cat imported.jsonl)"
  # In tp 2 pp 2 (vocabulary padded to 2304) and exported again: the same bytes.
  convert --from hf hf --save i22 --tp 2 --pp 2 --verify
  convert --load i22 --to hf --save hf22 --verify
  for f in model.safetensors config.json generation_config.json; do same_file hf/$f hf22/$f; done
  convert --load $A --to hf --dtype bf16 --save bf16 --verify
  grep -q '"torch_dtype": "bfloat16"' bf16/config.json || fail "bf16/config.json: $(cat bf16/config.json)"
  [ $(stat -c %s bf16/model.safetensors) -lt $(($(stat -c %s hf/model.safetensors) / 2 + 4096)) ] ||
    fail "the bf16 export is not half the size"
  fingerprint $A | cmp -s - before.md5 || fail "the input $A was modified"
done
# A checkpoint trained in tp 2 pp 2 exports as its one-process reshard does; in shards with an
# index past --max-shard-size, which import reads back; a SentencePiece tokenizer is copied.
rm -rf hf hf1 hfs back hfs2
convert --load s/iter_0000003 --to hf --save hf --verify
convert --load s1/iter_0000003 --to hf --save hf1
same_file hf/model.safetensors hf1/model.safetensors
convert --load s/iter_0000003 --to hf --save hfs --max-shard-size 300000 --tokenizer $M/fortunes_spm.model --verify
[ -f hfs/model.safetensors.index.json ] && [ -f hfs/model-00001-of-00004.safetensors ] && [ -f hfs/tokenizer.model ] ||
  fail "hfs holds $(ls hfs)"
convert --from hf hfs --save back --verify
convert --load back --to hf --save hfs2
same_file hf/model.safetensors hfs2/model.safetensors
# An import records the directory's tokenizer, which meg-generate then takes by default: a
# SentencePiece tokenizer.model, or GPT-2's vocab.json with merges.txt (here GPT-2's own, too large
# for this model, which says that it was taken); with neither, there is none to take.
meg-generate -q --device cpu --load back --prompt "The" --max-tokens 3 > /dev/null || fail "generating from back"
# The import keeps the tokenizer's files with the checkpoint.
cmp -s back/iter_0000000/tokenizer.model hfs/tokenizer.model || fail "the import did not keep the tokenizer"
rm -rf hfg hfn backg nothing && cp -r hf hfn && rm hfn/tokenizer.model
cp -r hfn hfg && cp $MEG_TEST_DATA/gpt2/vocab.json $MEG_TEST_DATA/gpt2/merges.txt hfg/
convert --from hf hfg --save backg
expect_fail 1 "^meg-generate: .*backg/iter_0000000/vocab.json: the tokenizer's 50257 tokens do not fit the model's vocabulary of 2100$" \
  -- meg-generate -q --device cpu --load backg --prompt "The"
convert --from hf hfn --save nothing
expect_fail 1 "nothing.*: the checkpoint records no tokenizer; name one with --tokenizer" \
  -- meg-generate -q --device cpu --load nothing --prompt "The"
# Exported without a tokenizer: one line says so, no tokenizer files, and no special ids that lie.
meg-ckpt-convert --load nothing --to hf --save hfnone 2>none.log
grep -q "no tokenizer known" none.log || fail "no word of the missing tokenizer: $(cat none.log)"
[ "$(ls hfnone | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] || fail "hfnone holds $(ls hfnone)"
grep -q '"bos_token_id": null' hfnone/config.json && grep -q '"eos_token_id": null' hfnone/config.json ||
  fail "hfnone/config.json names special ids: $(cat hfnone/config.json)"
# Bad Hugging Face input and options: one line naming the file, exit 1, nothing written.
rm -rf bad && cp -r hf bad && truncate -s -8 bad/model.safetensors
expect_fail 1 "bad/model.safetensors: .*truncated" -- convert --from hf bad --save out
no_file out
rm -rf bad && cp -r hf bad && printf 'X' | dd of=bad/model.safetensors bs=1 seek=12 conv=notrunc 2>/dev/null
expect_fail 1 "bad/model.safetensors: " -- convert --from hf bad --save out
no_file out
rm -rf bad && cp -r hfs bad && sed -i 's/model-00002-of-00004/model-00009-of-00004/' bad/model.safetensors.index.json
expect_fail 1 "bad/model.safetensors.index.json: weight_map: tensor .* which does not exist" -- \
  convert --from hf bad --save out
no_file out
rm -rf bad && cp -r hfs bad && sed -i '0,/model-00001-of-00004/s//model-00002-of-00004/' bad/model.safetensors.index.json
expect_fail 1 "bad/model-00002-of-00004.safetensors: has no tensor .*, which .*index.json places in it" -- \
  convert --from hf bad --save out
no_file out
rm -rf bad && cp -r hf bad && sed -i 's/"gpt2"/"falcon"/' bad/config.json
expect_fail 1 "bad/config.json: .*unknown architecture \"falcon\"" -- convert --from hf bad --save out
no_file out
# Far more layers than tensors (found by fuzzing: 49,992 layers took 23 s and 1.2 GB to refuse).
rm -rf bad && cp -r hf bad && python3 -c "
import json; c = json.load(open('bad/config.json')); c['n_layer'] = 49992; json.dump(c, open('bad/config.json', 'w'))"
expect_fail 1 "bad/config.json: 49992 layers, but bad holds only [0-9]* tensors" -- convert --from hf bad --save out
no_file out
python3 -c "
import json; c = json.load(open('bad/config.json')); c['n_layer'] = 42999992; json.dump(c, open('bad/config.json', 'w'))"
expect_fail 1 "bad/config.json: num-layers 42999992 is too large \(at most 65536\)" -- convert --from hf bad --save out
no_file out
expect_fail 1 "--tp 3: the model's attention heads \(4\) do not divide over 3 ranks" -- \
  convert --from hf hf --save out --tp 3
no_file out
expect_fail 1 "--to and --from together" -- convert --from hf hf --to hf --save out
expect_fail 1 "--dtype applies to --to hf only" -- convert --from hf hf --save out --dtype bf16
expect_fail 1 "--save DIR is required" -- convert --from hf hf
expect_fail 1 "--save DIR is required" -- convert --load s --to hf
expect_fail 1 "--tp: a Hugging Face directory has no parallel layout" -- convert --load s --to hf --save out --tp 2
expect_fail 1 "--to safetensors: unknown format" -- convert --load s --to safetensors --save out
expect_fail 1 "gpt2/vocab.json: the tokenizer has 50257 tokens, more than the model's vocabulary of 2100" -- \
  convert --load s --to hf --save out --tokenizer $MEG_TEST_DATA/gpt2/vocab.json --merges $MEG_TEST_DATA/gpt2/merges.txt
no_file out
expect_fail 1 "exists and is not empty" -- convert --load s --to hf --save hf
rm -rf bad && cp -r s bad
python3 - bad/iter_0000003/model-tp00-pp01.safetensors <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 1]))
PY
expect_fail 1 "model-tp00-pp01.safetensors: checksum mismatch" -- convert --load bad --to hf --save out
no_file out
echo "meg-ckpt-convert: all tests passed"
