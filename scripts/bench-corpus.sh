#!/usr/bin/env bash
# Builds the benchmark corpus: over 200 MB of distinct real text from Debian packages, one document
# per JSONL line with the text under "text".
#   scripts/bench-corpus.sh [OUT_DIR]     (default .bench in the repository root)
#     OUT_DIR/corpus.jsonl              the whole corpus
#     OUT_DIR/corpus-small.jsonl.zst    every 5th document (~50 MB), zstd -19, to carry elsewhere
#                                       (e.g. for scripts/bench-hf.py next to Hugging Face tokenizers)
#     OUT_DIR/corpus-sources.txt        the packages and versions used, and per-source sizes
# It does nothing when the files are there already; delete them to rebuild.
#
# Sources (all Debian main): the dictd databases GCIDE, WordNet, FOLDOC, Jargon, V.E.R.A. and
# The Devil's Dictionary (one document per entry); the Linux kernel's Documentation (reST, text);
# the King James Bible (one document per chapter); the reST sources of the Python, CMake, Debian
# Policy and Developer's Reference manuals; Perl's pod manuals; Git's asciidoc manuals; Node.js's API
# docs (Markdown); the GNU Coding Standards and the Debian Reference (plain text); the HTML manuals
# of PostgreSQL, Django, SciPy, SQLite, GNU Octave, Maxima, Vim, Erlang/OTP, the Java 17 API, the
# Rust books and std API, and the Debian Administrator's Handbook (in its 20-odd languages), tags
# stripped; the Linux and FreeBSD man pages (rendered with groff); and the fortunes (one document
# per fortune). About 95% of it is English.
#
# Prose files are cut at blank lines into paragraphs and grouped into documents of up to about
# 4 KiB ("sections"). Blocks are never repeated: a paragraph of 40 bytes or more that was seen
# before is dropped (navigation and boilerplate go this way), as is a dictionary entry whose body
# (everything after the head word) was seen before (WordNet repeats a gloss for every synonym),
# and no document appears twice. A paragraph over 4 KiB (a table, a listing) is cut at line ends;
# pages that only index other pages are left out.
# Text is decoded as UTF-8 with invalid bytes dropped, control characters other than tab and
# newline removed. Files are read in sorted order and the output depends only on the packages'
# contents, so the same package versions give the same bytes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
corpus=$out/corpus.jsonl
small=$out/corpus-small.jsonl.zst

report() {
  local bytes docs
  bytes=$(stat -c %s "$corpus")
  docs=$(wc -l < "$corpus")
  echo "bench-corpus: $corpus: $bytes bytes ($((bytes / 1000000)) MB), $docs documents" >&2
  echo "bench-corpus: $small: $(stat -c %s "$small") bytes compressed" >&2
}
if [ -s "$corpus" ] && [ -s "$small" ]; then report; exit 0; fi

packages=(
  dict-gcide dict-wn dict-foldoc dict-jargon dict-vera dict-devil
  linux-doc-6.1 bible-kjv python3.11-doc cmake-doc debian-policy developers-reference perl-doc git-doc
  nodejs-doc gnu-standards debian-reference-en postgresql-doc-15 python-django-doc sqlite3-doc
  python-scipy-doc octave-doc maxima-doc vim-doc erlang-doc openjdk-17-doc rust-doc debian-handbook
  manpages manpages-dev freebsd-manpages fortunes fortunes-min
  groff-base zstd python3
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench-corpus: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if [ ! -s "$corpus" ]; then
  {
    echo "# packages (dpkg-query name version)"
    dpkg-query -W -f='${Package} ${Version}\n' "${packages[@]}"
  } > "$out/corpus-sources.txt"
  python3 - "$corpus.tmp" "$out/corpus-sources.txt" <<'PY'
import gzip, hashlib, html.parser, json, os, re, subprocess, sys
from multiprocessing import Pool

out_path, sources_path = sys.argv[1], sys.argv[2]
MAX_DOC = 4096      # prose documents are groups of paragraphs up to about this many bytes
MIN_DEDUP = 40      # paragraphs this long or longer appear once in the corpus

def pkg_files(pkg, pattern):
    """Files of an installed package whose path matches the regex, sorted."""
    names = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    rx = re.compile(pattern)
    return sorted(f for f in names if rx.search(f) and os.path.isfile(f))

def read_bytes(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
def clean(data):
    text = data.decode("utf-8", errors="ignore") if isinstance(data, bytes) else data
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    return CONTROL.sub("", text)

def paragraphs(text):
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return [p.strip("\n") for p in re.split(r"\n\s*\n+", text) if p.strip()]

# ---------------------------------------------------------------- HTML to text
BLOCK = {"p", "div", "section", "article", "pre", "table", "blockquote", "h1", "h2", "h3", "h4",
         "h5", "h6", "ul", "ol", "dl", "hr", "figure", "main", "body"}
LINE = {"br", "li", "dt", "dd", "tr", "caption"}
VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "embed", "source",
        "track", "wbr", "param"}
SKIP_TAGS = {"script", "style", "head", "nav", "footer", "header", "noscript", "svg", "button",
             "form", "select", "textarea"}
SKIP_CLASS = {"sphinxsidebar", "related", "footer", "navheader", "navfooter", "navigation", "sidebar",
              "menu", "menu-bar", "breadcrumb", "breadcrumbs", "headerlink", "nosearch", "skip-link",
              "rst-versions", "nav-wrapper", "nav-chapters", "sidebar-elems", "search-form"}

class Html2Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip_tag, self.skip_depth, self.pre = [], None, 0, 0
    def handle_starttag(self, tag, attrs):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth += 1
            return
        cls = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        if tag in SKIP_TAGS or (tag not in VOID and tag not in ("html", "body")
                                and not SKIP_CLASS.isdisjoint(cls.split())):
            if tag not in VOID:
                self.skip_tag, self.skip_depth = tag, 1
            return
        if tag == "pre":
            self.pre += 1
        if tag in BLOCK:
            self.out.append("\n\n")
        elif tag in LINE:
            self.out.append("\n")
        elif tag in ("td", "th"):
            self.out.append(" ")
    def handle_startendtag(self, tag, attrs):
        if self.skip_tag is None and tag in LINE | BLOCK:
            self.out.append("\n")
    def handle_endtag(self, tag):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in BLOCK:
            self.out.append("\n\n")
        elif tag in LINE:
            self.out.append("\n")
    def handle_data(self, data):
        if self.skip_tag is not None:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))
    def text(self):
        lines = [l.strip() if not l.startswith("  ") else l.rstrip()
                 for l in "".join(self.out).split("\n")]
        return "\n".join(lines)

def html_text(data):
    p = Html2Text()
    p.feed(clean(data))
    p.close()
    return p.text()

# ---------------------------------------------------------------- extractors (run in a pool)
def extract(job):
    """Returns (kind, [units]); a unit is a list of paragraphs (prose) or an entry (dict, fortune)."""
    kind, path = job
    try:
        if kind == "text":
            return kind, paragraphs(clean(read_bytes(path)))
        if kind == "html":
            return kind, paragraphs(html_text(read_bytes(path)))
        if kind == "man":
            raw = read_bytes(path)
            if re.match(rb"\s*\.so\s", raw) and raw.count(b"\n") <= 2:
                return kind, []            # a link to another page
            r = subprocess.run("preconv | groff -mandoc -Tutf8 -t -P-cbou -rLL=78n -rcR=1",
                               input=raw, shell=True, capture_output=True, env={
                                   "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
            return kind, paragraphs(clean(r.stdout))
        if kind == "kjv":   # the King James Bible, one document per chapter
            r = subprocess.run(["bible", "-l80", path], capture_output=True, check=True)
            return kind, ["\n".join(c) for c in group_chapters(paragraphs(clean(r.stdout)))]
        if kind == "fortune":
            text = clean(read_bytes(path))
            return kind, [e.strip("\n") for e in re.split(r"\n%\n", "\n" + text + "\n")
                          if e.strip()]
    except Exception as e:  # one unreadable file should not stop the corpus
        print(f"bench-corpus: skipping {path}: {e}", file=sys.stderr)
    return kind, []

def group_chapters(paras):
    """bible prints a 'Book N' heading paragraph before each chapter's verses."""
    chapters = []
    for p in paras:
        if re.fullmatch(r"[1-3]?\s?[A-Z][A-Za-z ]+ \d+", p) or not chapters:
            chapters.append([p, ""])
        else:
            chapters[-1].append(p)
    return chapters

def dict_entries(name):
    """The entries of a dictd database, in file order, without its 00-database-* entries."""
    base = f"/usr/share/dictd/{name}"
    with open(base + ".dict.dz", "rb") as f:
        data = gzip.decompress(f.read())   # dictzip is gzip with a random-access table
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    val = lambda s: sum(b64.index(c) * 64 ** i for i, c in enumerate(reversed(s)))
    spans = set()
    with open(base + ".index", encoding="utf-8", errors="ignore") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0].startswith(("00-database", "00database")):
                continue
            spans.add((val(parts[1]), val(parts[2])))
    for off, n in sorted(spans):
        yield clean(data[off:off + n]).strip("\n")

# ---------------------------------------------------------------- the sources, in order
def sources():
    S = []
    for name in ["gcide", "wn", "foldoc", "jargon", "vera", "devil"]:
        S.append((f"dict-{name}", "dict", [name]))
    S += [
        ("linux-doc-6.1", "text", pkg_files("linux-doc-6.1", r"/Documentation/(.*\.(rst|txt)|ABI/.*/[^./]*)\.gz$")),
        ("python3.11-doc", "text", pkg_files("python3.11-doc", r"/html/_sources/.*\.txt$")),
        ("cmake-doc", "text", pkg_files("cmake-doc", r"/html/_sources/.*\.txt$")),
        ("debian-policy", "text", pkg_files("debian-policy", r"(_sources/.*\.txt|/(fhs/fhs-3\.0|menu-policy|perl-policy|autopkgtest|debconf_specification|copyright-format-1\.0)\.txt\.gz)$")),
        ("developers-reference", "text", pkg_files("developers-reference", r"/_sources/.*\.txt$")),
        ("perl-doc", "text", pkg_files("perl-doc", r"\.pod$")),
        ("git-doc", "text", pkg_files("git-doc", r"/git-doc/.*\.txt$")),
        ("nodejs-doc", "text", pkg_files("nodejs-doc", r"/api/.*\.md\.gz$")),
        ("gnu-standards", "text", pkg_files("gnu-standards", r"\.text\.gz$")),
        ("debian-reference-en", "text", pkg_files("debian-reference-en", r"\.en\.txt\.gz$")),
    ]
    S.append(("bible-kjv", "kjv", ["Gen1:1-Rev22:21"]))
    # Pages that only list or index other pages, or show source code, are left out.
    not_pages = (r"(/_modules/|/_static/|/genindex[^/]*\.html$|/search\.html$|/py-modindex\.html$|"
                 r"/bookindex\.html$|/print\.html$|/class-use/|/index-files/|-tree\.html$|"
                 r"/all(classes|packages)-index\.html$|/index-all\.html$|/doc_[a-z]*_crossref\.html$|"
                 r"/keyword_index\.html$|/vim/html/tags\.html$)")
    for pkg, rx in [("postgresql-doc-15", r"/html/.*\.html$"), ("python-django-doc", r"/html/.*\.html$"),
                    ("python-scipy-doc", r"/html/.*\.html$"), ("sqlite3-doc", r"\.html$"),
                    ("octave-doc", r"\.html$"), ("maxima-doc", r"\.html$"), ("vim-doc", r"\.html$"),
                    ("erlang-doc", r"\.html$"), ("openjdk-17-doc", r"/api/.*\.html$"),
                    # the Rust books (mdBook) and the std and alloc API (core repeats std)
                    ("rust-doc", r"/html/(book|rust-by-example|edition-guide|reference|nomicon|"
                                 r"embedded-book|rustc|rustdoc|unstable-book|std|alloc)/.*\.html$"),
                    ("debian-handbook", r"/html/[a-z][a-z]-[A-Z][A-Z]/[^/]*\.html$")]:  # 20+ languages
        S.append((pkg, "html", [f for f in pkg_files(pkg, rx) if not re.search(not_pages, f)]))
    for pkg in ["manpages", "manpages-dev", "freebsd-manpages"]:
        S.append((pkg, "man", pkg_files(pkg, r"^/usr/share/man/man[^/]*/[^/]*\.gz$")))
    fortunes = [f for f in pkg_files("fortunes", r"/fortunes/") + pkg_files("fortunes-min", r"/fortunes/")
                if not f.endswith((".dat", ".u8")) and not os.path.islink(f)]
    S.append(("fortunes", "fortune", sorted(set(fortunes))))
    return S

seen = set()
def fresh(block):
    if len(block.encode()) < MIN_DEDUP:
        return True
    h = hashlib.blake2b(block.encode(), digest_size=16).digest()
    if h in seen:
        return False
    seen.add(h)
    return True

def pieces(p):
    """A paragraph longer than MAX_DOC (a table, a long listing) is cut at line ends."""
    if len(p.encode()) <= MAX_DOC:
        return [p]
    out, cur, size = [], [], 0
    for line in p.split("\n"):
        n = len(line.encode()) + 1
        if cur and size + n > MAX_DOC:
            out.append("\n".join(cur)); cur, size = [], 0
        cur.append(line); size += n
    if cur:
        out.append("\n".join(cur))
    return out

out = open(out_path, "w", encoding="utf-8")
stats = []
seen_docs = set()
def emit(text):
    """Writes a document unless the same text was written before; returns its size in bytes."""
    h = hashlib.blake2b(text.encode(), digest_size=16).digest()
    if h in seen_docs:
        return 0
    seen_docs.add(h)
    out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return len(text.encode())

with Pool(os.cpu_count() or 2) as pool:
    for name, kind, items in sources():
        nbytes = ndocs = 0
        if kind == "dict":
            for entry in dict_entries(items[0]):
                head, _, body = entry.partition("\n")
                if not body.strip() or not fresh(re.sub(r"\s+", " ", body).strip()):
                    continue
                if (n := emit(entry)):
                    nbytes += n; ndocs += 1
        else:
            for _, units in pool.imap(extract, [(kind, f) for f in items], chunksize=4):
                if kind in ("fortune", "kjv"):   # each unit is one document
                    for e in units:
                        if fresh(e) and (n := emit(e)):
                            nbytes += n; ndocs += 1
                    continue
                doc, size = [], 0
                for p in (q for u in units for q in pieces(u)):
                    if not fresh(p):
                        continue
                    n = len(p.encode()) + 2
                    if doc and size + n > MAX_DOC:
                        if (m := emit("\n\n".join(doc))):
                            nbytes += m; ndocs += 1
                        doc, size = [], 0
                    doc.append(p); size += n
                if doc and size >= MIN_DEDUP and (m := emit("\n\n".join(doc))):
                    nbytes += m; ndocs += 1
        stats.append((name, len(items) if kind != "dict" else 1, ndocs, nbytes))
        print(f"bench-corpus: {name:22s} {ndocs:8d} documents {nbytes / 1e6:8.1f} MB", file=sys.stderr)
out.close()
with open(sources_path, "a") as f:
    f.write("# source files documents text_bytes\n")
    total_docs = total_bytes = 0
    for name, files, docs, nbytes in stats:
        f.write(f"{name} {files} {docs} {nbytes}\n")
        total_docs += docs; total_bytes += nbytes
    f.write(f"total - {total_docs} {total_bytes}\n")
PY
  mv "$corpus.tmp" "$corpus"
fi

# The small slice: every 5th document, so that it mixes all the sources.
awk 'NR % 5 == 1' "$corpus" | zstd -q -19 -T0 -f -o "$small.tmp"
mv "$small.tmp" "$small"
report
