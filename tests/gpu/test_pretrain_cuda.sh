# meg-pretrain on the GPU: the whole tool test suite of meg-pretrain again with --device cuda
# (learning, metrics, exact resume after --exit-interval, kill -9 and SIGTERM, refused options),
# then a 200-iteration run whose loss curve must track the CPU run's, in fp32 and in bf16, and
# checkpoints that move between the devices.
source "$(dirname "$0")/../tools/lib.sh"
require_gpus 1 "meg-pretrain on the GPU"
MEG_TEST_DEVICE=cuda bash "$(dirname "$0")/../tools/test_meg_pretrain.sh"

M=$MEG_TEST_DATA/megatron
meg-blend -q --seq-length 64 --samples 3300 -o curve.blend 1 $M/fortunes_spm
RUN="meg-pretrain -q --model tiny --data curve.blend --tokenizer $M/fortunes_spm.model --micro-batch 8
     --global-batch 16 --lr 3e-3 --warmup-iters 20 --lr-decay-iters 200 --log-interval 1"
$RUN --iters 200 --device cpu --metrics cpu.jsonl --save ck_cpu
$RUN --iters 200 --device cuda --precision fp32 --metrics fp32.jsonl
$RUN --iters 200 --device cuda --precision bf16 --metrics bf16.jsonl --save ck_gpu

# Two checks of each GPU curve against the CPU's. The first 10 iterations, before the runs'
# different rounding has grown: relative differences below 1e-3 (fp32) and 5e-2 (bf16): the GPU
# computes the same model. The level of the last 50 iterations (their mean): within 0.03 (fp32)
# and 0.15 (bf16). Past a hundred steps the curves have drifted apart chaotically, so their level,
# not each loss, is what can be compared: on the CPU alone another seed moves it by 0.01 to 0.26.
python3 - cpu.jsonl fp32.jsonl bf16.jsonl <<'PY' || fail "the GPU loss curves do not track the CPU's"
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if r["split"] == "train"]
cpu, fp32, bf16 = (losses(p) for p in sys.argv[1:])
assert len(cpu) == len(fp32) == len(bf16) == 200, (len(cpu), len(fp32), len(bf16))
def early(a, b): return max(abs(x - y) / abs(x) for x, y in zip(a[:10], b[:10]))
def level(a, b): return abs(sum(a[-50:]) - sum(b[-50:])) / 50
print(f"loss at 200: cpu {cpu[-1]:.4f} fp32 {fp32[-1]:.4f} bf16 {bf16[-1]:.4f}; first 10, largest relative "
      f"difference: fp32 {early(cpu, fp32):.2e} bf16 {early(cpu, bf16):.2e}; level of the last 50, difference: "
      f"fp32 {level(cpu, fp32):.4f} bf16 {level(cpu, bf16):.4f}")
assert cpu[0] - cpu[-1] > 1.0, "the CPU run did not learn"
assert early(cpu, fp32) < 1e-3, "fp32 GPU run starts apart from the CPU run"
assert early(cpu, bf16) < 5e-2, "bf16 GPU run starts apart from the CPU run"
assert level(cpu, fp32) < 0.03, "fp32 GPU run drifts from the CPU run"
assert level(cpu, bf16) < 0.15, "bf16 GPU run drifts from the CPU run"
PY

# Checkpoints cross devices: the GPU's loads on the CPU and the CPU's on the GPU, and training
# continues from them.
$RUN --device cpu --load ck_gpu --iters 205 --metrics from_gpu.jsonl
$RUN --device cuda --load ck_cpu --iters 205 --metrics from_cpu.jsonl
[ "$(grep -c '"loss"' from_gpu.jsonl)" -eq 5 ] || fail "CPU run from a GPU checkpoint: $(cat from_gpu.jsonl)"
[ "$(grep -c '"loss"' from_cpu.jsonl)" -eq 5 ] || fail "GPU run from a CPU checkpoint: $(cat from_cpu.jsonl)"
echo "meg-pretrain on cuda: all tests passed"
