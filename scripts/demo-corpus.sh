#!/usr/bin/env bash
# Writes the demo corpus: every fortune of Debian's fortunes packages as one JSONL document, in two
# collections (technical and general) so the demo can blend them with different weights.
#   scripts/demo-corpus.sh OUT_DIR    -> OUT_DIR/tech.jsonl, OUT_DIR/general.jsonl
set -euo pipefail
out=${1:?usage: demo-corpus.sh OUT_DIR}
src=/usr/share/games/fortunes
[ -d "$src" ] || { echo "demo-corpus: $src missing (apt-get install fortunes)" >&2; exit 1; }
mkdir -p "$out"

# Fortune files hold entries separated by lines of a single '%'. awk turns each entry into one JSON
# object; overstrike and other control characters are dropped, the rest escaped.
to_jsonl() {
  LC_ALL=C awk '
    function flush() {
      if (doc != "") {
        gsub(/\\/, "&&", doc); gsub(/"/, "\\\\&", doc); gsub(/\t/, "\\t", doc); gsub(/\n/, "\\n", doc)
        printf "{\"text\": \"%s\"}\n", doc
      }
      doc = ""
    }
    /^%$/ { flush(); next }
    { gsub(/[\001-\010\013-\037\177]/, ""); doc = (doc == "" ? $0 : doc "\n" $0) }
    END { flush() }' "$@"
}

tech=(computers linux debian science education definitions drugs medicine)
general=()
for f in "$src"/*; do
  name=$(basename "$f")
  case "$name" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] || continue
  [[ " ${tech[*]} " == *" $name "* ]] || general+=("$f")
done
to_jsonl "${tech[@]/#/$src/}" > "$out/tech.jsonl"
to_jsonl "${general[@]}" > "$out/general.jsonl"
