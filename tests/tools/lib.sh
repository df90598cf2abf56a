# Shared helpers for the tool tests (tests/tools/test_*.sh). Each test sources this file, runs the
# real binaries from $MEG_BIN on real files and calls pass/fail helpers; any failure exits 1.
set -euo pipefail

: "${MEG_BIN:?MEG_BIN must name the bin folder of a build}"
: "${MEG_TEST_DATA:?MEG_TEST_DATA must name tests/data}"
export PATH="$MEG_BIN:$PATH"
export LC_ALL=C.UTF-8

WORK=$(mktemp -d "${TMPDIR:-/tmp}/meg-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_fail EXPECTED_STATUS PATTERN -- COMMAND...: the command must exit with EXPECTED_STATUS and
# print exactly one line on stderr matching PATTERN (grep -E).
expect_fail() {
  local status=$1 pattern=$2
  shift 3
  local rc=0
  "$@" >"$WORK/.out" 2>"$WORK/.err" || rc=$?
  [ "$rc" -eq "$status" ] || fail "'$*' exited $rc, expected $status; stderr: $(cat "$WORK/.err")"
  [ "$(grep -c . "$WORK/.err")" -eq 1 ] || fail "'$*' should print one line on stderr, printed: $(cat "$WORK/.err")"
  grep -Eq -- "$pattern" "$WORK/.err" || fail "'$*' stderr '$(cat "$WORK/.err")' does not match '$pattern'"
}

# same_file A B: byte-identical.
same_file() { cmp -s "$1" "$2" || fail "$1 and $2 differ"; }

# no_file PATH...: none of these exist (nothing half-written left behind either).
no_file() {
  for f in "$@"; do [ ! -e "$f" ] || fail "$f should not exist"; done
  if ls -a "$WORK" | grep -q '\.tmp\.'; then fail "temporary files left behind: $(ls -a "$WORK")"; fi
}
