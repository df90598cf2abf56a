# meg-retro-build on the GPU, on a real small corpus with a tiny embedder trained here: in fp32 the
# GPU's embeddings are the CPU's (to the float16 they are stored in) and so are its neighbours; the
# flat index on the GPU gives the exact neighbours of its own embeddings (fp64 numpy, ties aside),
# never a chunk of the query's document; bf16 is the GPU's default and a change of precision
# rebuilds the embed stage and those after it, to the bytes of a fresh build; an interrupted embed
# stage resumes to the bytes of a whole one; a GPU-embedded database takes an approximate index;
# a blend's samples are embedded and searched on the GPU.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../tools/lib.sh"
require_gpus 1 "meg-retro-build on the GPU"
export PYTHONPATH=$HERE/../tools  # retro_mat.py: matrix files as lists of rows
M=$MEG_TEST_DATA/megatron

meg-blend -q --seq-length 64 --samples 800 -o f.blend 1 $M/fortunes_spm
meg-pretrain -q --device cpu --model tiny --data f.blend --tokenizer $M/fortunes_spm.model --micro-batch 8 \
  --global-batch 8 --lr 3e-3 --warmup-iters 5 --iters 60 --save emb
R="meg-retro-build -q --data $M/fortunes_spm --load emb --neighbors 10 --chunk-length 32"

# (1) fp32 on both devices, the flat index; bf16, the GPU's default.
$R --index-type flat --device cpu --out cpu
$R --index-type flat --device cuda --precision fp32 --out fp32
$R --index-type flat --device cuda --out bf16
for f in chunks.bin chunks.idx chunks.mat; do same_file cpu/db/$f fp32/db/$f; done
python3 - <<'PY' || fail "GPU embeddings or neighbours"
import json
import numpy as np
from retro_mat import mat
chunks = mat("cpu/db/chunks.mat")
cpu, fp32 = (np.array(mat(d + "/embed/embeddings.mat"), dtype=np.float64) for d in ("cpu", "fp32"))
# Within float16's rounding (2^-11 of a row's largest value) and fp32's, which differ.
scale = np.abs(cpu).max(axis=1, keepdims=True)
assert (np.abs(fp32 - cpu) <= 2e-3 * scale).all(), np.abs(fp32 - cpu).max()
assert json.load(open("bf16/embed/stage.json"))["settings"]["precision"] == "bf16"

def exact(e):  # each chunk's 10 nearest outside its document: the CPU's formula, in fp64, then fp32
    n2 = (e * e).sum(axis=1)
    d = n2[:, None] + n2[None, :] - 2 * e @ e.T
    d = np.where(d > 0, d, 0).astype(np.float32)
    doc = np.array([(c[0], c[1]) for c in chunks])
    d[(doc[:, None, 0] == doc[None, :, 0]) & (doc[:, None, 1] == doc[None, :, 1])] = np.inf
    ids = np.broadcast_to(np.arange(len(e)), d.shape)
    return d, np.lexsort((ids, d), axis=-1)[:, :10]  # by distance, then the lower id

def recall(a, b):
    return sum(len(set(x) & set(y)) for x, y in zip(a, b)) / (10 * len(b))

cpu_table = mat("cpu/query/neighbors.mat")
for name in ("fp32", "bf16"):
    e = np.array(mat(name + "/embed/embeddings.mat"), dtype=np.float64)
    table = mat(name + "/query/neighbors.mat")
    rows = [r[0] for r in mat(name + "/query/rows.mat")]
    d, want = exact(e)
    for q, got in zip(rows, table):
        assert -1 not in got and all(chunks[n][:2] != chunks[q][:2] for n in got), (name, q, got)
        for g, w in zip(got, want[q]):  # the same ids, or ties in fp32
            assert g == w or abs(d[q, g] - d[q, w]) <= 1e-6 * d[q, w] + 1e-6, (name, q, got, list(want[q]))
    print(name, "recall@10 against the CPU", recall(table, cpu_table))
    assert recall(table, cpu_table) >= (0.95 if name == "fp32" else 0.7), name
PY

# (2) A rerun on the GPU finds every stage done; another precision rebuilds the embed stage and
# those after it, and gives the bytes of a fresh build in that precision.
meg-retro-build --data $M/fortunes_spm --load emb --neighbors 10 --chunk-length 32 --index-type flat --device cuda \
  --precision fp32 --out fp32 2>log
for s in db embed index query; do grep -q "$s: up to date" log || fail "$s was not skipped: $(cat log)"; done
cp -r bf16 switched
meg-retro-build --data $M/fortunes_spm --load emb --neighbors 10 --chunk-length 32 --index-type flat --device cuda \
  --precision fp32 --out switched 2>log
grep -q "db: up to date" log || fail "db rebuilt: $(cat log)"
grep -q "embed: rebuilding: built with other precision" log || fail "embed not rebuilt: $(cat log)"
for f in embed/embeddings.mat query/neighbors.mat; do same_file fp32/$f switched/$f; done

# (3) Killed after 3 blocks of the GPU's embed stage, it resumes to the bytes of an uninterrupted
# build with the same blocks (and so the same batches).
exits_with 137 env MEG_RETRO_INTERRUPT_AFTER=3 $R --index-type flat --device cuda --out cut --block-rows 100
$R --index-type flat --device cuda --out cut --block-rows 100
$R --index-type flat --device cuda --out whole --block-rows 100
for f in embed/embeddings.mat query/neighbors.mat; do same_file whole/$f cut/$f; done

# (4) The GPU's embeddings under an approximate index (searched on the CPU).
$R --index-type ivf-pq --device cuda --out ivf-pq
python3 - <<'PY' || fail "ivf-pq over the GPU's embeddings"
from retro_mat import mat
a, e = mat("ivf-pq/query/neighbors.mat"), mat("bf16/query/neighbors.mat")
r = sum(len(set(x) & set(y)) for x, y in zip(a, e)) / (10 * len(e))
print("ivf-pq recall@10", r)
assert r >= 0.9, r
PY

# (5) A blend's train samples embedded on the GPU: a full table, in fp32 the CPU's neighbours.
BQ="meg-retro-build -q --data f.blend --load emb --neighbors 10 --chunk-length 32 --index-type flat --query-samples 300"
$BQ --device cpu --out blend-cpu
$BQ --device cuda --precision fp32 --out blend-fp32
python3 - <<'PY' || fail "blend neighbours on the GPU"
from retro_mat import mat
a, e = mat("blend-fp32/query/neighbors.mat"), mat("blend-cpu/query/neighbors.mat")
assert len(a) == len(e) == 600 and all(-1 not in r for r in a)
r = sum(len(set(x) & set(y)) for x, y in zip(a, e)) / (10 * len(e))
print("blend recall@10 against the CPU", r)
assert r >= 0.95, r
PY
echo "meg-retro-build on the GPU: ok"
