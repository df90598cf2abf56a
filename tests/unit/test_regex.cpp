// The regex engine of tokenizer.json pre-tokenizers (tokenizer/regex.hpp) and the Unicode tables
// under it: GPT-2's pattern against the hand-written GPT-2 scanner on random and real text, the
// patterns of real tokenizers on hand-checked text, each construct, find_iter()'s empty matches,
// the backtracking budget, and the refusals.
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "core/error.hpp"
#include "tokenizer/gpt2_bpe.hpp"
#include "tokenizer/regex.hpp"
#include "tokenizer/unicode_tables.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
using Pieces = std::vector<std::string>;
using Spans = std::vector<std::pair<size_t, size_t>>;

namespace {

const std::string kData = MEG_TEST_DATA;

const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kCl100k =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kDeepSeekCjk = R"([一-龥\u3040-ゟ゠-ヿ]+)";
const char* const kDeepSeek =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Spans spans(const Regex& re, std::string_view text) {
  Spans out;
  re.for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

Pieces pieces(const Regex& re, std::string_view text) {
  Pieces out;
  re.for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

Pieces pieces(const char* pattern, std::string_view text) { return pieces(Regex(pattern), text); }

Pieces gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> views;
  gpt2_pretokenize(text, views);
  return Pieces(views.begin(), views.end());
}

// The message of the InputError that compiling PATTERN gives.
std::string refusal(const std::string& pattern) {
  try {
    Regex re(pattern);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no refusal for " << pattern);
  return "";
}

// Random text over letters of several scripts, digits, marks, spaces of all kinds, \r \n, emoji
// and the letters of the contractions after apostrophes.
std::string random_text(std::mt19937& rng) {
  static const char* const kAlphabet[] = {
      "a", "Z", "s", "t", "d", "m", "l", "r", "e", "v", "S", "L", "\xC3\xA9", "\xC3\x9F", "\xD0\x96", "\xD0\xB6",
      "\xE4\xB8\xAD", "\xD8\xAA", "\xE0\xA4\x95", "1", "9", "\xD9\xA3", "\xC2\xB2", "\xE2\x85\xAB", "\xCC\x81",
      " ", " ", " ", "\t", "\n", "\r", "\xC2\xA0", "\xE2\x80\x83", "\xE3\x80\x80", "\xC2\x85", "'", "'", "!",
      ".", ",", "-", "\xF0\x9F\x98\x80", "\xE2\x80\x8B", "\xEF\xBB\xBF", "\x1F", "_", "\xE2\x80\x99"};
  std::uniform_int_distribution<size_t> length(0, 40), pick(0, std::size(kAlphabet) - 1);
  std::string s;
  for (size_t i = length(rng); i > 0; --i) s += kAlphabet[pick(rng)];
  return s;
}

}  // namespace

TEST_CASE("Unicode tables: categories, White_Space, case folding", "[regex]") {
  using unicode::GeneralCategory;
  using unicode::general_category;
  CHECK(general_category('A') == GeneralCategory::Lu);
  CHECK(general_category('a') == GeneralCategory::Ll);
  CHECK(general_category('7') == GeneralCategory::Nd);
  CHECK(general_category(' ') == GeneralCategory::Zs);
  CHECK(general_category('_') == GeneralCategory::Pc);
  CHECK(general_category(0x01C5) == GeneralCategory::Lt);
  CHECK(general_category(0x0301) == GeneralCategory::Mn);
  CHECK(general_category(0x2167) == GeneralCategory::Nl);
  CHECK(general_category(0x4E2D) == GeneralCategory::Lo);
  CHECK(general_category(0x1F600) == GeneralCategory::So);
  CHECK(general_category(0xFEFF) == GeneralCategory::Cf);
  CHECK(general_category(0xD800) == GeneralCategory::Cs);
  CHECK(general_category(0xE000) == GeneralCategory::Co);
  CHECK(general_category(0x10FFFF) == GeneralCategory::Cn);
  CHECK(general_category(0x110000) == GeneralCategory::Cn);
  CHECK(std::string(unicode::category_name(GeneralCategory::Pd)) == "Pd");

  CHECK(unicode::is_white_space(0x85));
  CHECK(unicode::is_white_space(0x3000));
  CHECK_FALSE(unicode::is_white_space(0xFEFF));
  CHECK_FALSE(unicode::is_white_space(0x200B));
  CHECK_FALSE(unicode::is_white_space(0x1C));

  CHECK(unicode::simple_case_fold('A') == 'a');
  CHECK(unicode::simple_case_fold(0x212A) == 'k');  // KELVIN SIGN
  CHECK(unicode::simple_case_fold(0x017F) == 's');  // LONG S
  CHECK(unicode::simple_case_fold('a') == 'a');
  CHECK(unicode::begins_multi_char_fold('s', 's'));
  CHECK_FALSE(unicode::begins_multi_char_fold('l', 'l'));

  // GPT-2's classes agree with the categories everywhere.
  for (uint32_t cp = 0; cp <= unicode::kMaxCodePoint; ++cp) {
    const auto c = unicode::bit(general_category(cp));
    const auto expected = unicode::is_white_space(cp) ? unicode::kSpace
                          : (c & unicode::kLetterMask) ? unicode::kLetter
                          : (c & unicode::kNumberMask) ? unicode::kNumber
                                                       : unicode::kOther;
    if (unicode::char_class(cp) != expected) FAIL("U+" << std::hex << cp);
  }
}

TEST_CASE("GPT-2's pattern splits as the GPT-2 scanner on random and real text", "[regex]") {
  const Regex re(kGpt2);
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const std::string text = random_text(rng);
    INFO(nlohmann::json(text).dump());
    REQUIRE(pieces(re, text) == gpt2_pieces(text));
  }
  std::ifstream in(kData + "/gpt2/parity.jsonl");
  int samples = 0;
  for (std::string line; std::getline(in, line); ++samples) {
    const auto text = nlohmann::json::parse(line).at("text").get<std::string>();
    REQUIRE(pieces(re, text) == gpt2_pieces(text));
  }
  CHECK(samples > 100);
}

TEST_CASE("The patterns of real tokenizers, by hand", "[regex]") {
  const std::string text = "I'M   here\n\n 12345 don't";
  CHECK(pieces(kLlama3, text) == Pieces{"I", "'M", "  ", " here", "\n\n", " ", "123", "45", " don", "'t"});
  CHECK(pieces(kQwen2, text) == Pieces{"I", "'M", "  ", " here", "\n\n", " ", "1", "2", "3", "4", "5", " don", "'t"});
  CHECK(pieces(kCl100k, text) == Pieces{"I", "'M", "  ", " here", "\n\n", " ", "123", "45", " don", "'t"});
  CHECK(pieces(kGpt2, text) == Pieces{"I", "'", "M", "  ", " here", "\n\n", " 12345", " don", "'t"});
  // Llama 3 takes one symbol or space before a word, \r\n after symbols; cl100k one \r or \n.
  CHECK(pieces(kLlama3, "(foo)\n\n\tbar") == Pieces{"(foo", ")\n\n", "\tbar"});
  CHECK(pieces(kCl100k, "x  \n\n y") == Pieces{"x", "  \n\n", " y"});
  CHECK(pieces(kLlama3, "x  \n\n y") == Pieces{"x", "  \n\n", " y"});

  CHECK(pieces(kTekken, "HelloWorld ABCdef ABC def") == Pieces{"Hello", "World", " ABCdef", " ABC", " def"});
  CHECK(pieces(kTekken, "a//\nb 42") == Pieces{"a", "//\n", "b", " ", "4", "2"});

  CHECK(pieces(R"(\p{N}{1,3})", "12345 x 6") == Pieces{"123", "45", "6"});
  CHECK(pieces(kDeepSeekCjk, "日本語のテキストabcカタカナ") == Pieces{"日本語のテキスト", "カタカナ"});
  CHECK(pieces(kDeepSeek, "Hello, world!\n.net") == Pieces{"Hello", ",", " world", "!\n", ".net"});

  CHECK(spans(Regex(" "), "a b  c") == Spans{{1, 2}, {3, 4}, {4, 5}});
  CHECK(pieces(R"(\s+)", "a b \t\n c") == Pieces{" ", " \t\n "});
  CHECK(pieces(R"(\d)", "a12٣") == Pieces{"1", "2", "٣"});
  CHECK(pieces(R"(\w+|[^\w\s]+)", "Hello, w\xC3\xB6rld! 123_x e\xCC\x81") ==
        Pieces{"Hello", ",", "w\xC3\xB6rld", "!", "123_x", "e\xCC\x81"});
  CHECK(pieces(R"([\p{P}])", "a,b.c!d+") == Pieces{",", ".", "!"});
  // Oniguruma's \w is its Word property: Alphabetic (Roman numerals, circled letters), M, Nd, Pc.
  CHECK(pieces(R"(\w+)", "x\xE2\x85\xAB\xE2\x93\x90 \xC2\xB2") == Pieces{"x\xE2\x85\xAB\xE2\x93\x90"});
}

TEST_CASE("Regex constructs", "[regex]") {
  SECTION("literals, escapes and '.'") {
    CHECK(pieces(R"(\x41\x{1F600}\u00e9\t\.\-\\)", "A😀é\t.-\\") == Pieces{"A😀é\t.-\\"});
    CHECK(pieces(R"(.+)", "ab\ncd") == Pieces{"ab", "cd"});
    CHECK(pieces(R"(\e\a\f\v\0)", std::string("\x1B\a\f\v\0", 5)).size() == 1);
  }
  SECTION("classes") {
    CHECK(pieces(R"([a\-z]+)", "b-az") == Pieces{"-az"});
    CHECK(pieces(R"([-a]+|[b-]+)", "a-b") == Pieces{"a-", "b"});
    CHECK(pieces(R"([\x{4e00}-\x{9fa5}]+)", "ab中文c") == Pieces{"中文"});
    CHECK(pieces(R"([^\s\p{L}]+)", "ab!? 1é") == Pieces{"!?", "1"});
    CHECK(pieces(R"([\S\d]+)", "a1 2") == Pieces{"a1", "2"});
    CHECK(pieces(R"([\P{L}]+)", "ab12cd") == Pieces{"12"});
    CHECK(pieces(R"(\p{^L}+)", "ab12cd") == Pieces{"12"});
    CHECK(pieces(R"(\p{Lu}+|\p{Uppercase_Letter})", "aBCd") == Pieces{"BC"});
    CHECK(pieces(R"(\p{M}+)", "e\xCC\x81") == Pieces{"\xCC\x81"});
    CHECK(pieces(R"([\b]\h+\H)", "\b0fAg") == Pieces{"\b0fAg"});
  }
  SECTION("quantifiers: greedy, lazy, counted") {
    CHECK(pieces("a+?", "aaa") == Pieces{"a", "a", "a"});
    CHECK(pieces("a{2,3}?", "aaaaa") == Pieces{"aa", "aa"});
    CHECK(pieces("a{2}", "aaaaa") == Pieces{"aa", "aa"});
    CHECK(pieces("a{2,}", "aaaaa a") == Pieces{"aaaaa"});
    CHECK(pieces("a{,2}b", "aaab") == Pieces{"aab"});
    CHECK(pieces("a??b", "ab") == Pieces{"ab"});
    CHECK(pieces("(?:ab){1,3}", "abababab") == Pieces{"ababab", "ab"});
    CHECK(pieces("(?:ab)*?c", "ababc") == Pieces{"ababc"});
    CHECK(pieces("(?:a|ab)(?:c|bcd)", "abcd") == Pieces{"abcd"});
    CHECK(pieces("(a*)*b", "aab") == Pieces{"aab"});
    // Ruby's syntax: {n,m}+ repeats the repetition, {n}? makes it optional.
    CHECK(pieces("a{2}+", "aaaaa") == Pieces{"aaaa"});
    CHECK(spans(Regex("a{2}?"), "a") == Spans{{0, 0}, {1, 1}});
  }
  SECTION("many alternatives, many copies") {
    std::string many;
    for (int i = 0; i < 100; ++i) many += (i ? "|x" : "x") + std::to_string(i) + "y";
    CHECK(pieces(many.c_str(), "x99y x70y x5y x100y") == Pieces{"x99y", "x70y", "x5y"});
    std::string ab;
    for (int i = 0; i < 15000; ++i) ab += "ab";
    CHECK(pieces("(?:a|b){15000}", ab + "ab") == Pieces{ab.substr(0, 15000), ab.substr(15000)});
  }
  SECTION("possessive and atomic") {
    CHECK(pieces("a?a", "a") == Pieces{"a"});
    CHECK(pieces("a?+a", "a").empty());
    CHECK(pieces(R"(\d+\d)", "123") == Pieces{"123"});
    CHECK(pieces(R"(\d++\d)", "123").empty());
    CHECK(pieces("(?:ab)++b", "ababb") == Pieces{"ababb"});
    CHECK(pieces("(?:ab)++ab", "abab").empty());
    CHECK(pieces("(?>a+)a", "aaa").empty());
    CHECK(pieces("(?>a|ab)c", "abc").empty());
    CHECK(pieces("(?>ab|a)c", "abc") == Pieces{"abc"});
  }
  SECTION("lookahead and anchors") {
    CHECK(pieces(R"(\s+(?!\S))", "a  ") == Pieces{"  "});
    CHECK(pieces(R"(\s+(?!\S))", "a   b") == Pieces{"  "});
    CHECK(spans(Regex("a(?=b)"), "ab ac") == Spans{{0, 1}});
    CHECK(spans(Regex("a(?!b)"), "ab ac") == Spans{{3, 4}});
    CHECK(spans(Regex("^a"), "a\na") == Spans{{0, 1}, {2, 3}});
    CHECK(spans(Regex("a$"), "a\na") == Spans{{0, 1}, {2, 3}});
    CHECK(spans(Regex(R"(\Aa)"), "a\na") == Spans{{0, 1}});
    CHECK(spans(Regex(R"(a\z)"), "a\na") == Spans{{2, 3}});
    CHECK(spans(Regex(R"(a\Z)"), "a\na\n") == Spans{{2, 3}});
    CHECK(spans(Regex(R"(\Ba)"), "a ba") == Spans{{3, 4}});
  }
  SECTION("(?i)") {
    CHECK(pieces("(?i)abc", "ABC aBc abd") == Pieces{"ABC", "aBc"});
    CHECK(pieces("(?i:'s)|x", "'S 's X x") == Pieces{"'S", "'s", "x"});
    CHECK(pieces("a(?i)b", "aB AB") == Pieces{"aB"});
    CHECK(pieces("(?i)k", "K\xE2\x84\xAA") == Pieces{"K", "\xE2\x84\xAA"});  // KELVIN SIGN
    CHECK(pieces("(?i)[a-c]+", "xBcAd") == Pieces{"BcA"});
    CHECK(pieces("(?i)[^a]+", "AaB") == Pieces{"B"});
    CHECK(pieces("(?i:a(?-i)b)", "Ab AB") == Pieces{"Ab"});
    CHECK(pieces(kCl100k, "'S'LL'Ve") == Pieces{"'S", "'LL", "'Ve"});
  }
}

TEST_CASE("Successive matches as onig's find_iter", "[regex]") {
  // Empty matches: one code point later each time, none right after a non-empty match.
  CHECK(spans(Regex(R"(\d*)"), "a1b2") == Spans{{0, 0}, {1, 2}, {3, 4}});
  CHECK(spans(Regex(R"(\d*)"), "a1bbb2") == Spans{{0, 0}, {1, 2}, {3, 3}, {4, 4}, {5, 6}});
  CHECK(spans(Regex(R"(\b)"), "test string") == Spans{{0, 0}, {4, 4}, {5, 5}, {11, 11}});
  CHECK(spans(Regex("x*"), "é") == Spans{{0, 0}, {2, 2}});
  CHECK(spans(Regex("(?:a?)*"), "aa") == Spans{{0, 2}});
  CHECK(spans(Regex("a|"), "") == Spans{{0, 0}});
  CHECK(spans(Regex("a"), "").empty());
}

TEST_CASE("Regex matching from many threads at once", "[regex]") {
  const Regex re(kLlama3);
  std::string text;
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) text += random_text(rng);
  const Pieces expected = pieces(re, text);
  std::vector<Pieces> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = pieces(re, text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expected);
}

TEST_CASE("Catastrophic backtracking ends in an InputError", "[regex]") {
  const Regex re("(?:a*)*b");
  const std::string text(2000, 'a');
  CHECK_THROWS_WITH(pieces(re, text), ContainsSubstring("backtracks too much"));
  CHECK(pieces(re, "aaab") == Pieces{"aaab"});
}

TEST_CASE("Regex refusals name the construct and its offset", "[regex]") {
  const std::pair<const char*, const char*> cases[] = {
      {"a(?<=x)", "offset 1: lookbehind (?<= is not supported"},
      {"(?<!x)", "offset 0: lookbehind (?<! is not supported"},
      {R"((a)\1)", "offset 3: backreference \\1"},
      {"(ab", "offset 0: unbalanced '('"},
      {"ab)", "offset 2: unbalanced ')'"},
      {R"(\p{Foo})", "offset 0: unsupported property \\p{Foo}"},
      {R"(x\p{Han})", "offset 1: unsupported property \\p{Han}"},
      {R"(\pL)", "offset 0: \\p needs a name in braces"},
      {"[[:alpha:]]", "offset 1: '[' inside a class"},
      {"[a&&b]", "offset 2: class intersection"},
      {"[abc", "offset 0: unterminated class"},
      {"[]a]", "offset 1: ']' at the start of a class"},
      {"[z-a]", "offset 1: a range that ends before it begins"},
      {"*a", "offset 0: quantifier '*' with nothing to repeat"},
      {"a**", "offset 2: a quantifier on a quantifier"},
      {"a{3,2}", "offset 1: repetition {3,2} with its maximum below its minimum"},
      {"a{200000}", "offset 2: repetition count 200000 above 100000"},
      {"x{y", "offset 1: '{' that does not begin a repetition"},
      {R"(\xE9)", "offset 0: \\xE9 is a raw byte"},
      {R"(\q)", "offset 0: escape \\q is not supported"},
      {R"(\K)", "offset 0: escape \\K is not supported"},
      {"(?s)a", "offset 2: option 's'"},
      {"(?#c)", "offset 0: comment group"},
      {"a(?i)b|c", "offset 1: an option group like (?i) before '|'"},
      {R"((?i)\p{L})", "offset 4: \\p{L} under (?i)"},
      {"(?i)ss", "offset 4: two characters under (?i)"},
      {"(?i)\xC3\x9F", "offset 4: U+00DF under (?i)"},
      {"(?i)[\xC3\x9F]", "offset 5: U+00DF in a class under (?i)"},
      {"^*", "offset 0: a quantifier after an assertion"},
      {"\xFF", "offset 0: the pattern is not valid UTF-8"},
      {"x\\", "offset 1: the pattern ends with '\\'"},
  };
  for (const auto& [pattern, message] : cases) {
    const std::string got = refusal(pattern);
    INFO(pattern);
    CHECK_THAT(got, ContainsSubstring(message));
    CHECK(got.find('\n') == std::string::npos);
  }
  CHECK_THAT(refusal(std::string(150, '(') + std::string(150, ')')), ContainsSubstring("nested deeper than 100"));
  std::string options;
  for (int i = 0; i < 150; ++i) options += "(?i)";
  CHECK_THAT(refusal(options), ContainsSubstring("nested deeper than 100"));
  CHECK_THAT(refusal("(?:(?:ab){1000}){1000}"), ContainsSubstring("too large"));
}
