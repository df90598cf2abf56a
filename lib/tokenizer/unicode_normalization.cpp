#include "tokenizer/unicode_normalization.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/bytes.hpp"
#include "core/utf8.hpp"

namespace meg {

namespace {

// One code point's data (see scripts/gen-unicode-normalization.py): canonical combining class,
// stable-boundary flags by form, and offsets into kSequences (0: maps to itself).
struct Record {
  uint8_t ccc;
  uint8_t stable;
  uint16_t canonical, compatibility, lowercase;
};

#include "tokenizer/unicode_normalization_data.inc"

// Hangul syllables: S = SBase + (L * VCount + V) * TCount + T (UAX #15, section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// The record of CP; beyond U+10FFFF (what a 5-byte-style lead byte decodes to), that of U+0000:
// stable, class 0, mapped to itself.
const Record& record(char32_t cp) {
  if (cp >= 0x110000) cp = 0;
  const uint16_t block = kBlocks[cp >> kBlockShift];
  return kRecords[kRecordIndex[(size_t(block) << kBlockShift) | (cp & ((1U << kBlockShift) - 1))]];
}

std::span<const char32_t> sequence(uint16_t offset) { return {kSequences + offset + 1, kSequences[offset]}; }

uint8_t stable_flag(NormalizationForm form) {
  switch (form) {
    case NormalizationForm::kNFD: return 1;
    case NormalizationForm::kNFKD: return 2;
    case NormalizationForm::kNFC: return 4;
    case NormalizationForm::kNFKC: return 8;
  }
  return 0;
}

bool compatibility(NormalizationForm form) {
  return form == NormalizationForm::kNFKC || form == NormalizationForm::kNFKD;
}

bool composes(NormalizationForm form) { return form == NormalizationForm::kNFC || form == NormalizationForm::kNFKC; }

// Appends the full decomposition of CP to OUT.
void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp - kSBase < kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + s % kNCount / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Record& r = record(cp);
  const uint16_t offset = compat ? r.compatibility : r.canonical;
  if (offset == 0) {
    out.push_back(cp);
  } else {
    const auto seq = sequence(offset);
    out.insert(out.end(), seq.begin(), seq.end());
  }
}

// Canonical ordering: each run of non-starters sorted by combining class, keeping the order of
// equal classes. Runs are a mark or two in real text; a long one takes the library's stable sort.
void reorder(std::vector<char32_t>& cps) {
  const auto by_class = [](char32_t a, char32_t b) { return record(a).ccc < record(b).ccc; };
  for (size_t i = 0; i < cps.size();) {
    if (record(cps[i]).ccc == 0) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < cps.size() && record(cps[end]).ccc != 0) ++end;
    if (end - i > 1) std::stable_sort(cps.begin() + i, cps.begin() + end, by_class);
    i = end;
  }
}

// The primary composite of FIRST and SECOND, or 0.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first - kLBase < kLCount && second - kVBase < kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first - kSBase < kSCount && (first - kSBase) % kTCount == 0 && second - kTBase - 1 < kTCount - 1)
    return first + (second - kTBase);
  const uint64_t key = uint64_t(first) << 42 | uint64_t(second) << 21;
  const uint64_t* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), key);
  return it != std::end(kCompositions) && (*it & ~uint64_t((1U << 21) - 1)) == key ? char32_t(*it & ((1U << 21) - 1))
                                                                                    : 0;
}

// Canonical composition in place: a code point joins the last starter when the pair composes and
// no code point between them is a starter or has a class as high as its own.
void compose(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t starter = 0, kept = 1;
  int last_class = record(cps[0]).ccc == 0 ? 0 : 256;  // 256: no starter yet, nothing composes
  for (size_t i = 1; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const int cls = record(cp).ccc;
    const bool blocked = last_class == 256 || (last_class != 0 && last_class >= cls);
    if (const char32_t composite = blocked ? 0 : compose_pair(cps[starter], cp); composite != 0) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) starter = kept;
    last_class = cls;
    cps[kept++] = cp;
  }
  cps.resize(kept);
}

}  // namespace

// Copies runs of stable boundaries through; each stretch of other code points is normalized
// together with the stable code point before it (which a mark may compose with) up to the next
// stable one, where nothing before can reach across.
std::string normalize(std::string_view utf8, NormalizationForm form) {
  const auto* s = reinterpret_cast<const uint8_t*>(utf8.data());
  const size_t n = utf8.size();
  const uint8_t flag = stable_flag(form);
  const bool compat = compatibility(form);
  std::string out;
  std::vector<char32_t> cps;
  size_t copied = 0, pos = 0;
  while (pos < n) {
    size_t prev = n;  // the stable code point just before POS, where it may start the next stretch
    size_t len = 1;
    char32_t cp = 0;
    while (pos < n) {
      if (s[pos] < 0x80) {  // ASCII is stable in every form; eight bytes at a time where it can
        while (pos + 9 <= n && (load_unaligned<uint64_t>(s + pos + 1) & 0x8080808080808080ULL) == 0) pos += 8;
        prev = pos++;
        continue;
      }
      cp = next_code_point(s, n, pos, &len);
      if (len == 1 || (record(cp).stable & flag)) {  // a malformed byte stays as it is
        prev = len == 1 ? n : pos;
        pos += len;
        continue;
      }
      break;
    }
    if (pos == n) break;
    if (out.empty()) out.reserve(n + n / 8);
    const size_t start = prev < n ? prev : pos;
    out.append(utf8.data() + copied, start - copied);
    cps.clear();
    for (size_t at = start, l = 0; at < pos; at += l) decompose(next_code_point(s, n, at, &l), compat, cps);
    decompose(cp, compat, cps);
    pos += len;
    while (pos < n && s[pos] >= 0x80) {
      cp = next_code_point(s, n, pos, &len);
      if (len == 1 || (record(cp).stable & flag)) break;
      decompose(cp, compat, cps);
      pos += len;
    }
    reorder(cps);
    if (composes(form)) compose(cps);
    for (const char32_t c : cps) append_utf8(out, c);
    copied = pos;
  }
  if (copied == 0) return std::string(utf8);
  out.append(utf8.data() + copied, n - copied);
  return out;
}

std::string lowercase(std::string_view utf8) {
  const auto* s = reinterpret_cast<const uint8_t*>(utf8.data());
  const size_t n = utf8.size();
  std::string out;
  out.reserve(n);
  for (size_t pos = 0; pos < n;) {
    if (s[pos] < 0x80) {  // a run of ASCII, appended and then folded in a loop the compiler vectorizes
      size_t end = pos + 1;
      while (end < n && s[end] < 0x80) ++end;
      const size_t at = out.size();
      out.append(utf8.data() + pos, end - pos);
      for (size_t i = at; i < out.size(); ++i) out[i] = static_cast<char>(out[i] + (out[i] >= 'A' && out[i] <= 'Z') * 32);
      pos = end;
      continue;
    }
    size_t len = 0;
    const char32_t cp = next_code_point(s, n, pos, &len);
    const uint16_t offset = len == 1 ? 0 : record(cp).lowercase;
    if (offset == 0) {
      out.append(utf8.data() + pos, len);
    } else {
      for (const char32_t c : sequence(offset)) append_utf8(out, c);
    }
    pos += len;
  }
  return out;
}

const char* unicode_normalization_version() { return kUnicodeVersion; }

}  // namespace meg
