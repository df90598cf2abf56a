# Golden values on the CPU (tests/tools/golden.sh): a tiny GPT and a tiny Llama in one process,
# and under mpirun with tensor parallelism (2 ranks) and pipeline parallelism (2 stages), each
# equal to its committed losses, gradient norms and validation losses to the last bit. The bits
# depend on the compiler and the BLAS kernels as well as on meg: the files were written on the
# platform tests/data/golden/cpu-platform.txt names (the development machines and CI), and on any
# other the test reports itself skipped rather than failing on the last bits of another toolchain.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export MEG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
platform=$(python3 - <<'PY'
import ctypes, platform
os_release = dict(l.rstrip("\n").split("=", 1) for l in open("/etc/os-release") if "=" in l)
blas = ctypes.CDLL("libopenblas.so.0")
blas.openblas_get_config.restype = blas.openblas_get_corename.restype = ctypes.c_char_p
print(f'{os_release.get("ID", "?")} {os_release.get("VERSION_ID", "?").strip(chr(34))} {platform.machine()}; '
      f'{blas.openblas_get_config().decode()}; core {blas.openblas_get_corename().decode()}')
PY
)
if [ "${MEG_GOLDEN_WRITE:-0}" = 1 ]; then
  echo "$platform" >"$MEG_TEST_DATA/golden/cpu-platform.txt"
elif [ "$platform" != "$(cat "$MEG_TEST_DATA/golden/cpu-platform.txt")" ]; then
  echo "golden losses on the CPU: skipped, written on '$(cat "$MEG_TEST_DATA/golden/cpu-platform.txt")', this is '$platform'"
  exit 77
fi
source "$HERE/golden.sh"
for model in tiny tiny-llama; do
  golden $model-cpu -- --device cpu --model $model
  golden $model-cpu-tp2 mpi 2 -- --device cpu --model $model --tp 2
  golden $model-cpu-pp2 mpi 2 -- --device cpu --model $model --pp 2
done
echo "golden losses: identical"
