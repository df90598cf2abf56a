# meg-retro-build on a real small corpus with a tiny embedder trained here: every index type finds
# 9 of the exact 10 nearest chunks and none of the chunk's own document; a rerun skips what is
# done and rebuilds what is stale; stages killed mid-way resume to the same bytes; builds repeat
# exactly; a blend gives the database its prefixes give and a neighbour table by training sample,
# none of whose neighbours comes from a document of the sample; bad input is refused with one line.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=$HERE  # retro_mat.py: matrix files as lists of rows
M=$MEG_TEST_DATA/megatron

meg-blend -q --seq-length 64 --samples 800 -o f.blend 1 $M/fortunes_spm
meg-pretrain -q --device cpu --model tiny --data f.blend --tokenizer $M/fortunes_spm.model --micro-batch 8 \
  --global-batch 8 --lr 3e-3 --warmup-iters 5 --iters 60 --save emb
# The CPU path (a CUDA machine's default is the GPU: tests/gpu/test_retro_build_cuda.sh).
DATA="--data $M/fortunes_spm --load emb --neighbors 10 --device cpu"
R="meg-retro-build -q $DATA --chunk-length 32"

# (1) Every index type. Against the exact neighbours: recall@10 of at least 0.9; every table: only
# chunks of other documents, the training chunks those of the train split (969,30,1 of 605
# documents: the first 586), every row full.
for t in flat ivf ivf-pq hnsw; do $R --out $t --index-type $t; done
python3 - <<'PY' || fail "neighbour tables"
from retro_mat import mat
chunks = mat("flat/db/chunks.mat")
exact = mat("flat/query/neighbors.mat")
for t in ["flat", "ivf", "ivf-pq", "hnsw"]:
    rows = [r[0] for r in mat(t + "/query/rows.mat")]
    table = mat(t + "/query/neighbors.mat")
    assert rows == [i for i, c in enumerate(chunks) if c[1] < 586], t
    for q, nbrs in zip(rows, table):
        assert -1 not in nbrs, (t, q)
        assert all(chunks[n][:2] != chunks[q][:2] for n in nbrs), (t, q, nbrs)
    recall = sum(len(set(a) & set(e)) for a, e in zip(table, exact)) / (10 * len(exact))
    print(t, "recall@10", recall)
    assert recall >= 0.9, (t, recall)
PY

# (2) A rerun finds every stage done and rewrites nothing.
cp -r ivf-pq before
meg-retro-build $DATA --chunk-length 32 --out ivf-pq 2>log
for s in db embed index query; do grep -q "$s: up to date" log || fail "$s was not skipped: $(cat log)"; done
for f in db/chunks.bin db/chunks.idx db/chunks.mat embed/embeddings.mat index/codes.mat query/neighbors.mat; do
  same_file before/$f ivf-pq/$f
done

# (3) Another option rebuilds its stage and those after it, no other.
meg-retro-build --data $M/fortunes_spm --load emb --chunk-length 32 --neighbors 5 --device cpu --out ivf-pq 2>log
grep -q "index: up to date" log || fail "index rebuilt: $(cat log)"
grep -q "query: rebuilding: built with other neighbors" log || fail "query not rebuilt: $(cat log)"
meg-retro-build $DATA --chunk-length 32 --nprobe 3 --out ivf-pq 2>log
grep -q "query: rebuilding: built with other search" log || fail "query not rebuilt for --nprobe: $(cat log)"
$R --out ivf-pq
same_file before/query/neighbors.mat ivf-pq/query/neighbors.mat

# (4) The same build twice gives the same bytes.
for t in ivf-pq hnsw; do
  $R --out again-$t --index-type $t
  for f in $(cd $t && ls */*.mat */*.bin */*.idx); do same_file $t/$f again-$t/$f; done
done

# (5) Killed after 3 blocks of the embed stage, then after 2 of the query stage: each resumes where
# it stopped, and the result is the bytes of the uninterrupted build.
exits_with 137 env MEG_RETRO_INTERRUPT_AFTER=3 $R --out cut --block-rows 100
[ -f cut/embed/embeddings.mat.partial ] && [ ! -f cut/embed/stage.json ] || fail "no partial embeddings: $(ls cut/embed)"
meg-retro-build $DATA --chunk-length 32 --out cut --block-rows 100 \
  --stages db,embed 2>log
grep -q "embed: resuming after 300 of 1317 chunks" log || fail "embed did not resume: $(cat log)"
same_file ivf-pq/embed/embeddings.mat cut/embed/embeddings.mat
exits_with 137 env MEG_RETRO_INTERRUPT_AFTER=2 $R --out cut --block-rows 100
meg-retro-build $DATA --chunk-length 32 --out cut --block-rows 100 2>log
grep -q "query: resuming after 200 of 1284 query rows" log || fail "query did not resume: $(cat log)"
same_file ivf-pq/query/neighbors.mat cut/query/neighbors.mat
same_file ivf-pq/query/rows.mat cut/query/rows.mat
no_file cut/embed/embeddings.mat.partial cut/query/neighbors.mat.partial cut/query/neighbors.mat.progress

# (6) The blend of the same prefix, with the same split, is the same database; its neighbour table
# has a row per chunk of each train sample (64 tokens: 2 chunks of 32), in the blend's order, and
# no neighbour of a row is a chunk of any document the sample's tokens come from (read here from
# the blend file's own indices, as Megatron's GPTDataset reads them).
BQ="--data f.blend --load emb --neighbors 10 --chunk-length 32 --index-type flat --query-samples 300 --device cpu"
meg-retro-build -q $BQ --out blend
for f in db/chunks.mat embed/embeddings.mat; do same_file ivf-pq/$f blend/$f; done
no_file blend/query/rows.mat
python3 - <<'PY' || fail "neighbour table of the blend's samples"
import struct
from retro_mat import mat
b = open("f.blend", "rb").read()
h = struct.unpack_from("<8sQIIQQQQ3d3Q3Q3Q3Q", b)
inputs, seq_length, samples = h[3], h[7], h[14]
arr = lambda kind, offset, n: struct.unpack_from("<%d%s" % (n, kind), b, offset)
dataset_index, dataset_sample = arr("H", h[17], samples), arr("q", h[20], samples)
split = []  # per input, its train split: (document index, sample index, shuffle index)
for k in range(inputs):
    begin, end, _, epochs, _, n, _, docs, bounds, shuffle = struct.unpack_from("<ddQQQQQ30Q", b, 176 + 296 * k)[7:17]
    split.append((arr("i", docs, epochs * (end - begin)), arr("q", bounds, 2 * (n + 1)), arr("q", shuffle, n)))
def documents(i):  # (input, document) of every document sample i's T+1 tokens come from
    k = dataset_index[i]
    docs, bounds, shuffle = split[k]
    j = shuffle[dataset_sample[i]]
    return {(k, d) for d in docs[bounds[2 * j]:bounds[2 * j + 2] + 1]}
chunks = mat("blend/db/chunks.mat")
table = mat("blend/query/neighbors.mat")
per_sample = seq_length // 32
assert per_sample == 2 and len(table) == 300 * per_sample, len(table)
crossing = 0
for r, nbrs in enumerate(table):
    banned = documents(r // per_sample)
    crossing += len(banned) > 1
    assert -1 not in nbrs, r
    assert all(tuple(chunks[n][:2]) not in banned for n in nbrs), (r, nbrs, banned)
assert crossing > 0  # samples across document edges, whose several documents are all left out
PY

# (6b) The query stage of a blend killed after 2 blocks resumes to the bytes of the whole build.
cp -r blend bcut && rm -r bcut/query
exits_with 137 env MEG_RETRO_INTERRUPT_AFTER=2 meg-retro-build -q $BQ --out bcut --block-rows 100
meg-retro-build $BQ --out bcut --block-rows 100 2>log
grep -q "query: resuming after 200 of 600 query rows" log || fail "blend query did not resume: $(cat log)"
same_file blend/query/neighbors.mat bcut/query/neighbors.mat

# (7) Bad input: one line, exit status 1.
python3 - <<'PY'
import struct
def write(prefix, dtype, docs):  # a Megatron indexed dataset of one sequence per document
    item = {4: 4, 8: 2}[dtype]
    idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, dtype, len(docs), len(docs) + 1)
    idx += struct.pack("<%di" % len(docs), *map(len, docs))
    offsets = [sum(map(len, docs[:i])) * item for i in range(len(docs))]
    idx += struct.pack("<%dq" % len(docs), *offsets) + struct.pack("<%dq" % (len(docs) + 1), *range(len(docs) + 1))
    open(prefix + ".idx", "wb").write(idx)
    open(prefix + ".bin", "wb").write(b"".join(struct.pack("<%d%s" % (len(d), "i" if item == 4 else "H"), *d) for d in docs))
write("empty", 8, [])
write("wide", 4, [[1, 2, 3]])
PY
expect_fail 1 "empty: no tokens \(an empty input\)" -- meg-retro-build -q --data empty --load emb --out bad
expect_fail 1 "wide holds int32 tokens but .*fortunes_spm holds uint16: the inputs come from different tokenizers" -- \
  meg-retro-build -q --data $M/fortunes_spm wide --load emb --out bad
expect_fail 1 "fortunes_gpt2.bin: offset [0-9]+: token [0-9]+ is outside the vocabulary of 2000 \(the embedder's\): the inputs and the embedder \(.*emb/iter_0000060\) use different tokenizers" -- \
  meg-retro-build -q --data $M/fortunes_gpt2 --load emb --out gpt2
expect_fail 1 "fresh/db: the db stage is missing \(not built\); run it: --stages db" -- $R --out fresh --stages query
expect_fail 1 "ivf-pq/db: the db stage is stale \(built with other chunk_length\); run it: --stages db" -- \
  meg-retro-build -q $DATA --out ivf-pq --stages query --chunk-length 16
expect_fail 1 "ivf-pq/index: the index stage is stale \(built with other index\); run it: --stages index" -- \
  $R --out ivf-pq --stages query --index-type hnsw
expect_fail 1 "--load DIR \(the embedder checkpoint\) is required" -- meg-retro-build --data $M/fortunes_spm --out ivf-pq
expect_fail 1 "--stages: unknown stage 'embedding'" -- $R --out bad --stages db,embedding
expect_fail 1 "--index-type lsh: unknown" -- $R --out bad --index-type lsh
expect_fail 1 "--pq-m 7: the 64 dimensions do not split" -- $R --out bad --pq-m 7
expect_fail 1 "--nlist 5000: more lists than the 1317 vectors" -- $R --out bad --nlist 5000
expect_fail 1 "--chunk-length 100: longer than the embedder's 64 positions" -- meg-retro-build -q $DATA --out bad --chunk-length 100
expect_fail 1 "--split 1,1,0: .*f.blend is a blend, which has its own split" -- meg-retro-build -q --data f.blend --load emb --out bad --split 1,1,0
expect_fail 1 "--chunk-length 48: does not divide the sequence length 64 of .*f.blend" -- \
  meg-retro-build -q --data f.blend --load emb --out bad --chunk-length 48
expect_fail 1 "--query-samples 5000: .*f.blend has only 800 train samples" -- \
  meg-retro-build -q --data f.blend --load emb --out bad --chunk-length 32 --query-samples 5000
expect_fail 1 "--query-samples 10: needs a blend" -- $R --out bad --query-samples 10
expect_fail 1 "must be positive" -- meg-retro-build -q $DATA --out bad --chunk-length 0
expect_fail 1 "--pad-id 70000: not a token of the inputs' dtype uint16" -- $R --out bad --pad-id 70000
B="meg-retro-build -q --data $M/fortunes_spm --load emb --chunk-length 32 --out bad"
expect_fail 1 "--device 'tpu': expected cpu or cuda" -- $B --device tpu
expect_fail 1 "--precision 'fp8': expected bf16, fp16 or fp32" -- $B --precision fp8
expect_fail 1 "--precision bf16: the CPU path computes in fp32 only; use --device cuda" -- $B --device cpu --precision bf16
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_fail 1 "--device cuda: (no CUDA device is visible|this build of meg has no CUDA support)" -- $B --device cuda
fi
printf '\x01' | dd of=ivf-pq/embed/embeddings.mat bs=1 seek=1000 conv=notrunc status=none
expect_fail 1 "ivf-pq/embed/embeddings.mat: checksum mismatch" -- $R --out ivf-pq --index-type ivf --stages index
echo "meg-retro-build: ok"
