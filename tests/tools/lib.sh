# Shared helpers for the tool tests (tests/tools/test_*.sh). Each test sources this file, runs the
# real binaries from $MEG_BIN on real files and calls pass/fail helpers; any failure exits 1.
set -euo pipefail

: "${MEG_BIN:?MEG_BIN must name the bin folder of a build}"
: "${MEG_TEST_DATA:?MEG_TEST_DATA must name tests/data}"
export PATH="$MEG_BIN:$PATH"
export LC_ALL=C.UTF-8

WORK=$(mktemp -d "${TMPDIR:-/tmp}/meg-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# Open MPI keeps each mpirun's session directory under TMPDIR, in one directory per host and
# user: two tests running mpirun side by side (ctest -j) would share it, and the first to finish
# removes it while the other is still creating its own there ("mkdir ... No such file or
# directory", orte_init failed). So each test gives its mpirun processes a TMPDIR of its own.
export TMPDIR="$WORK"
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# exits_with STATUS COMMAND...: runs COMMAND (stdout and stderr kept in $WORK/.out and .err) and
# fails unless it exits with STATUS.
exits_with() {
  local status=$1
  shift
  local rc=0
  "$@" >"$WORK/.out" 2>"$WORK/.err" || rc=$?
  [ "$rc" -eq "$status" ] || fail "'$*' exited $rc, expected $status; stderr: $(cat "$WORK/.err")"
}

# stderr_matches PATTERN: the last command's stderr has a line matching PATTERN (grep -E).
stderr_matches() {
  grep -Eq -- "$1" "$WORK/.err" || fail "stderr '$(cat "$WORK/.err")' does not match '$1'"
}

# expect_fail EXPECTED_STATUS PATTERN -- COMMAND...: the command must exit with EXPECTED_STATUS and
# print exactly one line on stderr matching PATTERN (grep -E).
expect_fail() {
  local status=$1 pattern=$2
  shift 3
  exits_with "$status" "$@"
  [ "$(grep -c . "$WORK/.err")" -eq 1 ] || fail "'$*' should print one line on stderr, printed: $(cat "$WORK/.err")"
  stderr_matches "$pattern"
}

# losses METRICS.jsonl: the training losses of a metrics file, one per line.
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }

# losses_close A B TOLERANCE: the loss files A and B have as many losses, each of B within
# TOLERANCE (relative) of A's.
losses_close() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "losses of $2 differ from $1 beyond $3: $(paste -d' ' "$1" "$2" | head -20)"
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst < float(sys.argv[3]), worst
PY
}

# same_file A B: byte-identical.
same_file() { cmp -s "$1" "$2" || fail "$1 and $2 differ"; }

# no_file PATH...: none of these exist (nothing half-written left behind either).
no_file() {
  for f in "$@"; do [ ! -e "$f" ] || fail "$f should not exist"; done
  if ls -a "$WORK" | grep -q '\.tmp\.'; then fail "temporary files left behind: $(ls -a "$WORK")"; fi
}

# expect_fail_mpi STATUS PATTERN -- mpi N COMMAND...: the job must exit with STATUS and its stderr
# (every rank's, and mpirun's own report of the abort) must hold a line matching PATTERN.
expect_fail_mpi() {
  local status=$1 pattern=$2
  shift 3
  exits_with "$status" "$@"
  stderr_matches "$pattern"
}

# mpi N COMMAND...: COMMAND on N ranks under mpirun (oversubscribed: N may exceed the cores), one
# thread each so that the ranks do not fight over the cores.
mpi() {
  local n=$1
  shift
  local root=()
  [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
  mpirun "${root[@]}" --oversubscribe -np "$n" -x OPENBLAS_NUM_THREADS=1 -x MEG_NUM_THREADS=1 -x PATH "$@"
}

# require_gpus N WHAT: sets gpus to the GPUs visible; with fewer than N, says WHAT was skipped and
# ends the test with status 77, which ctest reports as skipped (SKIP_RETURN_CODE), not passed.
require_gpus() {
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "$gpus" -lt "$1" ]; then
    echo "$2: skipped, $gpus GPU(s) visible, $1 needed"
    exit 77
  fi
}

# require_golden_platform WHAT: for tests that compare bits computed by the CPU with committed
# files (golden losses, checkpoint fixtures). The bits depend on the compiler and the BLAS kernels
# as well as on meg: the files were written on the platform tests/data/golden/cpu-platform.txt
# names. OpenBLAS picks its kernels by the CPU it finds; this asks for the kernels the file names
# (OPENBLAS_CORETYPE), so that any x86 machine with that build of OpenBLAS computes the same
# bits. On another platform, says WHAT was skipped and ends the test with status 77. With
# MEG_GOLDEN_WRITE=1 it records this platform instead.
require_golden_platform() {
  local file="$MEG_TEST_DATA/golden/cpu-platform.txt"
  if [ "${MEG_GOLDEN_WRITE:-0}" != 1 ] && [ -f "$file" ]; then
    OPENBLAS_CORETYPE="$(sed -n 's/.*; core //p' "$file")"
    export OPENBLAS_CORETYPE
  fi
  local platform
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
    echo "$platform" >"$file"
  elif [ "$platform" != "$(cat "$file")" ]; then
    echo "$1: skipped, written on '$(cat "$file")', this is '$platform'"
    exit 77
  fi
}

# corrupt_idx IDX EDIT...: writes corrupt copies of the dataset index IDX, each beside a link to
# its .bin, in one python run (python starts slowly on a loaded machine), and prints "S L0": the
# sequence count and sequence 0's length. EDIT NAME:OFFSET:FORMAT:VALUE writes NAME.idx with
# VALUE packed little-endian (FORMAT a struct code: B, i, q) at OFFSET, both python expressions
# that may use S and L0; EDIT random:N writes r1.idx ... rN.idx with 1 to 4 random bytes over the
# lengths (the same bytes every run).
corrupt_idx() {
  local idx=$1
  shift
  python3 - "$idx" "$@" <<'PY'
import os, random, struct, sys
idx = open(sys.argv[1], 'rb').read()
S, L0 = struct.unpack_from('<Q', idx, 18)[0], struct.unpack_from('<i', idx, 34)[0]
def write(name, b):
    open(name + '.idx', 'wb').write(b)
    os.symlink(os.path.abspath(sys.argv[1][:-4] + '.bin'), name + '.bin')
for edit in sys.argv[2:]:
    fields = edit.split(':')
    b = bytearray(idx)
    if fields[0] == 'random':
        r = random.Random(46)
        for k in range(1, int(fields[1]) + 1):
            b = bytearray(idx)
            while b == idx:
                for _ in range(r.randint(1, 4)):
                    b[34 + r.randrange(4 * S)] = r.randrange(256)
            write('r%d' % k, b)
        continue
    name, offset, fmt, value = fields
    struct.pack_into('<' + fmt, b, eval(offset), eval(value))
    write(name, b)
print(S, L0)
PY
}

# Crash tests: kill -9 at random moments of a command that replaces an existing result, then check
# that the final names hold the whole old result, the whole new one, or (where the format allows)
# none. crash_trials prints how many trials to run: MEG_CRASH_TRIALS, 10 by default.
crash_trials() { echo "${MEG_CRASH_TRIALS:-10}"; }

# run_seconds COMMAND...: runs COMMAND (its output discarded; it must succeed) and prints how long
# it took in seconds, the span over which to spread the kill moments.
run_seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || fail "'$*' failed"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f\n", b - a }'
}

# kill_at_random_moment SECONDS COMMAND...: starts COMMAND (a program, not a shell function, so
# that the signal reaches it), sends it SIGKILL after a random delay of up to SECONDS, and waits.
# It may finish first; anything but success or death by SIGKILL fails the test.
kill_at_random_moment() {
  local max=$1
  shift
  "$@" >/dev/null 2>&1 &
  local pid=$! rc=0
  sleep "$(awk -v m="$max" -v r="$RANDOM" 'BEGIN { printf "%.4f", m * r / 32767 }')"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 137 ] || fail "'$*' exited $rc before it was killed"
}

# sanitized: the binaries under test are built with AddressSanitizer, whose shadow memory needs a
# vast address space, so that ulimit -v cannot limit them.
sanitized() { [ -n "${MEG_SANITIZED:-}" ]; }  # set by the sanitizer build's ctest

# small_memory COMMAND...: runs COMMAND allowed about 1 GB of memory, to show that it allocates
# no more: under ulimit -v, or when sanitized under AddressSanitizer's own allocation limit.
small_memory() {
  if sanitized; then
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_limit_mb=1000" "$@"
  else
    (ulimit -v 1000000 && exec "$@")
  fi
}
