// The pieces of meg-eval that must behave as Python does for lm-evaluation-harness's prompts to
// come out the same: str semantics, random.Random's draws, WikiText detokenization and
// HellaSwag's preprocessing. The expected values were produced by CPython 3.11 running
// lm-eval's own functions on the same inputs.
#include <string>
#include <vector>

#include "catch.hpp"
#include "eval/doc_format.hpp"
#include "eval/python_random.hpp"
#include "eval/python_text.hpp"
#include "eval/wikitext.hpp"

using namespace meg;

TEST_CASE("eval python text: whitespace, strip, len and word counts as CPython", "[eval]") {
  // Every code point str.isspace() accepts, and no other.
  const std::vector<char32_t> spaces = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                                        0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                        0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
  std::vector<char32_t> found;
  for (char32_t c = 0; c < 0x110000; ++c)
    if (py::is_space(c)) found.push_back(c);
  CHECK(found == spaces);

  CHECK(py::length("naïve café, 東京 😀") == 16);
  CHECK(py::rstrip("Answer:\u3000 \n") == "Answer:");
  CHECK(py::rstrip("a\u00a0") == "a");
  CHECK(py::rstrip("\xe6\x9d\xb1") == "\xe6\x9d\xb1");  // a multi-byte character that is not a space
  CHECK(py::strip("\x1c  text \t") == "text");
  CHECK(py::strip(" \n ").empty());
  CHECK(py::lstrip(" \u2028x ") == "x ");
  // len(re.split(r"\s+", s)): one more than the runs of whitespace, ends included.
  CHECK(py::count_words("") == 1);
  CHECK(py::count_words("one") == 1);
  CHECK(py::count_words("one two  three") == 3);
  CHECK(py::count_words(" lead and trail\u2003") == 5);
  CHECK(py::split("a b  c", ' ') == std::vector<std::string_view>{"a", "b", "", "c"});
  CHECK(py::replace("aaaa", "aa", "b") == "bb");
  CHECK(py::replace("   ", "  ", " ") == "  ");
  CHECK(py::capitalize_ascii("hELLO wORLD") == "Hello world");
}

TEST_CASE("eval python random: Random(seed).sample draws what CPython draws", "[eval]") {
  py::Random zero(0);
  CHECK(zero.next32() == 3626764237u);
  CHECK(zero.next32() == 1654615998u);
  CHECK(zero.next32() == 3255389356u);

  // A population small enough for sample()'s pool algorithm.
  py::Random a(1234);
  CHECK(a.sample(25, 3) == std::vector<size_t>{24, 14, 3});
  CHECK(a.sample(25, 3) == std::vector<size_t>{0, 2, 18});
  // Its set algorithm (k > 5, population above the switch-over size).
  py::Random b(7);
  CHECK(b.sample(100, 8) == std::vector<size_t>{41, 19, 50, 83, 6, 9, 68, 12});
  CHECK(b.sample(100, 8) == std::vector<size_t>{46, 74, 7, 64, 27, 4, 11, 55});
  // A seed of two 32-bit words, and a whole permutation.
  py::Random c((int64_t{1} << 40) + 5);
  CHECK(c.sample(10, 10) == std::vector<size_t>{8, 9, 4, 5, 0, 7, 6, 3, 2, 1});
  py::Random negative(-((int64_t{1} << 40) + 5));  // CPython seeds with the absolute value
  CHECK(negative.sample(10, 10) == std::vector<size_t>{8, 9, 4, 5, 0, 7, 6, 3, 2, 1});
}

TEST_CASE("eval wikitext: detokenized as lm-eval's wikitext_detokenizer", "[eval]") {
  CHECK(wikitext_detokenize(
            " = = Early life = = \n He was born in 1 @,@ 200 , the son of a farmer 's wife ( Mary ) . ") ==
        " == Early life ==\nHe was born in 1,200, the son of a farmer's wife (Mary). ");
  // Brackets to the first closing one, not across a missing one; the last rule's " 's" too.
  CHECK(wikitext_detokenize("a ( b ( c ) d ) e [ x\ny ] { \u3000z } \" quoted \" ' single ' tail ( open") ==
        "a (b ( c) d ) e [x\ny] {z} \"quoted\"'single' tail ( open");
  // lm-eval's "/' [0-9]/" pattern replaces with the literal text; degrees, " N ", headings.
  CHECK(
      wikitext_detokenize(
          "the players ' /' 5/ kit : 3 @.@ 5 m @-@ long ; ok ! why ? 40 \u00b0 C , N items \n = = = = Deep = = = = ") ==
      "the players'/'[0-9]/ kit: 3.5 m-long; ok! why? 40\u00b0C, 1 items\n==== Deep ==== ");
}

TEST_CASE("eval hellaswag rows: prompt and endings preprocessed as lm-eval's utils.py", "[eval]") {
  const auto doc = parse_doc(nlohmann::json::parse(R"({"activity_label": "Personal Care",
      "ctx_a": "[header] How to brush your teeth [title] Wet the brush.  [step] Add a small amount of toothpaste.",
      "ctx_b": "then", "endings": ["bury [it] the brush.", "[substeps] brush gently.", "a [b\nc] d", " x "],
      "label": "1"})"),
                             TaskType::multiple_choice, "h.jsonl:1");
  CHECK(doc.text == "Personal Care: How to brush your teeth. Wet the brush.  Add a small amount of toothpaste. Then");
  CHECK(doc.choices == std::vector<std::string>{"bury the brush.", " brush gently.", "a [b\nc] d", "x"});
  CHECK(doc.gold == 1);
  CHECK(doc.target == " brush gently.");
}
