// Unicode normalization and lowercase against Python's unicodedata (tests/data/unicode/
// normalization.tsv, written by make-normalization-tsv.py beside it): every code point that some
// form maps elsewhere, Hangul, reordering, exclusions and random mark sequences; every other code
// point maps to itself; the fast path, malformed bytes, and many threads at once.
#include <array>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "catch.hpp"
#include "core/utf8.hpp"
#include "tokenizer/unicode_normalization.hpp"

using namespace meg;

namespace {

constexpr std::array kForms = {NormalizationForm::kNFC, NormalizationForm::kNFD, NormalizationForm::kNFKC,
                               NormalizationForm::kNFKD};
constexpr std::array kFormNames = {"NFC", "NFD", "NFKC", "NFKD"};

std::string utf8(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// One line of the vectors: the source, its four forms in kForms order, and its lowercase.
struct Vector {
  int line;
  std::string source;
  std::array<std::string, 4> forms;
  std::string lower;
};

struct Vectors {
  std::string version;
  std::vector<Vector> lines;
  std::set<char32_t> listed;  // the code points that are a whole source
};

const Vectors& vectors() {
  static const Vectors v = [] {
    Vectors out;
    std::ifstream in(std::string(MEG_TEST_DATA) + "/unicode/normalization.tsv");
    REQUIRE(in);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.starts_with("# Unicode ")) out.version = line.substr(10, line.find(';') - 10);
      if (line.starts_with("#")) continue;
      std::vector<std::string> fields;
      std::vector<char32_t> first;
      std::stringstream columns(line);
      for (std::string column; std::getline(columns, column, '\t');) {
        std::stringstream hexes(column);
        std::string text;
        for (std::string hex; hexes >> hex;) {
          const auto cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
          if (fields.empty()) first.push_back(cp);
          text += utf8(cp);
        }
        fields.push_back(text);
      }
      REQUIRE(fields.size() == 6);
      out.lines.push_back({number, fields[0], {fields[1], fields[2], fields[3], fields[4]}, fields[5]});
      if (first.size() == 1) out.listed.insert(first[0]);
    }
    return out;
  }();
  return v;
}

std::string hex(std::string_view s) {
  std::string out;
  for (const unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

}  // namespace

TEST_CASE("Normalization gives Python's unicodedata results on the test vectors", "[normalization]") {
  const Vectors& v = vectors();
  REQUIRE(v.lines.size() > 5000);
  CHECK(v.version == unicode_normalization_version());
  size_t failures = 0;
  for (const Vector& t : v.lines) {
    for (size_t f = 0; f < kForms.size(); ++f) {
      const std::string got = normalize(t.source, kForms[f]);
      // A form is idempotent, and each form of the other forms is the form (as NormalizationTest
      // checks: NFC(NFD(x)) == NFC(x) and so on).
      const std::string again = normalize(t.forms[(f + 1) % 4], kForms[f]);
      const bool same_family = (f < 2) == ((f + 1) % 4 < 2);
      if (got != t.forms[f] || normalize(t.forms[f], kForms[f]) != t.forms[f] || (same_family && again != t.forms[f])) {
        if (++failures <= 10)
          FAIL_CHECK(fmt::format("line {}: {} of {} gives {}, not {}", t.line, kFormNames[f], hex(t.source), hex(got),
                                 hex(t.forms[f])));
      }
    }
    if (lowercase(t.source) != t.lower && ++failures <= 10)
      FAIL_CHECK(fmt::format("line {}: lowercase of {} gives {}, not {}", t.line, hex(t.source),
                             hex(lowercase(t.source)), hex(t.lower)));
  }
  CHECK(failures == 0);
}

TEST_CASE("Code points the vectors leave out map to themselves in every form", "[normalization]") {
  const Vectors& v = vectors();
  size_t failures = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xAC00 && cp <= 0xD7A3) || v.listed.contains(cp)) continue;
    const std::string s = utf8(cp);
    bool same = lowercase(s) == s;
    for (const NormalizationForm form : kForms) same = same && normalize(s, form) == s;
    if (!same && ++failures <= 10) FAIL_CHECK(fmt::format("U+{:04X} changes", uint32_t(cp)));
  }
  CHECK(failures == 0);
}

TEST_CASE("Every Hangul syllable decomposes into its jamo and composes back", "[normalization]") {
  for (char32_t s = 0xAC00; s <= 0xD7A3; ++s) {
    const std::string syllable = utf8(s);
    const std::string jamo = normalize(syllable, NormalizationForm::kNFD);
    const size_t count = (s - 0xAC00) % 28 == 0 ? 2 : 3;
    REQUIRE(jamo.size() == 3 * count);  // each jamo U+1100..U+11FF is 3 bytes
    REQUIRE(jamo.substr(0, 3) == utf8(0x1100 + (s - 0xAC00) / 588));
    REQUIRE(normalize(jamo, NormalizationForm::kNFC) == syllable);
    REQUIRE(normalize(syllable, NormalizationForm::kNFC) == syllable);
  }
}

TEST_CASE("Normalization copies normalized text and malformed bytes as they are", "[normalization]") {
  std::string ascii;
  for (int i = 0; i < 1000; ++i) ascii += "The quick brown fox, 123!\n\t";
  for (const NormalizationForm form : kForms) CHECK(normalize(ascii, form) == ascii);
  CHECK(normalize("", NormalizationForm::kNFC).empty());
  CHECK(lowercase("").empty());
  // A mark after ASCII composes with it; text around stays; a stray byte is no code point.
  CHECK(normalize("caf" "e\xcc\x81" " ok", NormalizationForm::kNFC) == "caf\xc3\xa9 ok");
  CHECK(normalize("\xff" "e\xcc\x81\xff", NormalizationForm::kNFC) == "\xff\xc3\xa9\xff");
  CHECK(normalize("\xcc\x81\xe9", NormalizationForm::kNFD) == "\xcc\x81\xe9");  // a truncated sequence
  CHECK(normalize("\xc3\xa9\xcc", NormalizationForm::kNFD) == "e\xcc\x81\xcc");
  CHECK(lowercase("\xff\xc3\x89\xce\xa3") == "\xff\xc3\xa9\xcf\x83");  // ÉΣ -> éσ: no final sigma
  CHECK(lowercase("\xc4\xb0") == "i\xcc\x87");  // İ -> i + combining dot above (SpecialCasing)
  // A long run of marks in reverse order of class.
  std::string marks = "a";
  for (int i = 0; i < 100; ++i) marks += "\xcc\x81\xcc\xa3";  // U+0301 (230), U+0323 (220)
  std::string sorted = "\xe1\xba\xa1";  // a + U+0323 composes to U+1EA1
  for (int i = 0; i < 99; ++i) sorted += "\xcc\xa3";
  for (int i = 0; i < 100; ++i) sorted += "\xcc\x81";
  CHECK(normalize(marks, NormalizationForm::kNFC) == sorted);
}

TEST_CASE("Normalization gives the same from many threads at once", "[normalization]") {
  const Vectors& v = vectors();
  std::vector<std::thread> threads;
  std::vector<size_t> wrong(4, 0);
  for (size_t k = 0; k < wrong.size(); ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = k; i < v.lines.size(); i += 2)
        wrong[k] += normalize(v.lines[i].source, kForms[k]) != v.lines[i].forms[k];
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == std::vector<size_t>(4, 0));
}
