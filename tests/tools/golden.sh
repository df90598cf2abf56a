# Golden values, as Megatron's functional tests keep them: the first 20 training losses, gradient
# norms and validation losses of a tiny GPT and a tiny Llama, compared bit for bit with committed
# files (tests/data/golden/). Any change that moves one bit of the numerics fails here, so a
# refactoring that claims to keep the behaviour proves it. Sourced by test_golden_losses.sh (CPU,
# one process and under mpirun) and tests/gpu/test_golden_losses_cuda.sh (fp32 and bf16).
#
# With MEG_GOLDEN_WRITE=1 the runs write the files instead of checking them: only for a change that
# moves the numerics on purpose, and the commit says why.
M=$MEG_TEST_DATA/megatron
GOLDEN=$MEG_TEST_DATA/golden
meg-blend -q --seq-length 32 --samples 400 -o golden.blend 1 $M/fortunes_spm

# golden NAME [mpi N] -- OPTIONS...: meg-pretrain with OPTIONS for 20 iterations (with gradient
# accumulation, hidden dropout and a validation pass every 5 iterations), then its metrics
# against tests/data/golden/NAME.jsonl, each value equal to the last bit.
golden() {
  local name=$1 launch=()
  shift
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  rm -f golden.jsonl
  "${launch[@]}" meg-pretrain -q --data golden.blend --tokenizer $M/fortunes_spm.model --micro-batch 2 \
    --global-batch 4 --lr 3e-3 --warmup-iters 5 --iters 20 --hidden-dropout 0.1 --log-interval 1 \
    --eval-interval 5 --eval-iters 2 --seed 1234 --metrics golden.jsonl "$@"
  python3 - golden.jsonl "$GOLDEN/$name.jsonl" "${MEG_GOLDEN_WRITE:-0}" <<'PY' || fail "$name: not the golden values (tests/data/golden/$name.jsonl)"
import json, sys
keys = ("iteration", "loss", "grad_norm", "valid_loss")
got = [{k: r[k] for k in keys if k in r} for r in map(json.loads, open(sys.argv[1]))]
assert len(got) == 24, f"{len(got)} metrics lines, expected 20 steps and 4 validations"
if sys.argv[3] == "1":
    with open(sys.argv[2], "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in got)
    sys.exit(0)
want = [json.loads(l) for l in open(sys.argv[2])]
for g, w in zip(got, want):
    if g != w:  # floats parsed from their shortest round-trip text: equal only if every bit is
        sys.exit(f"first difference: {json.dumps(g)} against the golden {json.dumps(w)}")
assert len(got) == len(want), (len(got), len(want))
PY
}
