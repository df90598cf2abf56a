// Text around generation: streaming detokenisation in whole UTF-8 characters (GPT-2 byte-level
// tokens that split characters, SentencePiece's spaces), the outputs' prompt order, and prompts
// from JSONL with their settings and their errors.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "test_util.hpp"
#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"
#include "infer/outputs.hpp"
#include "infer/prompts.hpp"
#include "infer/text_stream.hpp"

using namespace meg;

namespace {

const std::string kData = MEG_TEST_DATA;

std::unique_ptr<Tokenizer> gpt2() { return load_tokenizer(kData + "/gpt2/vocab.json", kData + "/gpt2/merges.txt"); }
std::unique_ptr<Tokenizer> spm() { return load_tokenizer(kData + "/megatron/fortunes_spm.model"); }

// What a TextStream releases for TEXT's tokens after its first FIRST tokens, piece by piece, and
// how many tokens released nothing.
struct Streamed {
  std::string text;
  int held = 0;
};
Streamed stream(const Tokenizer& tok, const std::string& text, size_t first) {
  std::vector<int32_t> ids;
  tok.encode(text, ids);
  REQUIRE(ids.size() > first);
  TextStream s(tok, {ids.data(), first});
  Streamed out;
  for (size_t i = first; i < ids.size(); ++i) {
    const std::string piece = s.push(ids[i]);
    CHECK(valid_utf8(piece));
    out.held += piece.empty();
    out.text += piece;
  }
  out.text += s.finish();
  return out;
}

}  // namespace

TEST_CASE("text stream: GPT-2 tokens that split characters are released as whole characters", "[infer][text]") {
  const auto tok = gpt2();
  const Streamed s = stream(*tok, "Hello façade € 😀 日本語 done", 1);
  CHECK(s.text == " façade € 😀 日本語 done");
  CHECK(s.held > 0);  // some characters came in several tokens

  // A character left incomplete at the end comes out as U+FFFD.
  std::vector<int32_t> ids;
  tok->encode("a😀", ids);
  REQUIRE(ids.size() >= 3);
  TextStream t(*tok, {ids.data(), 1});
  CHECK(t.push(ids[1]).empty());
  CHECK(t.finish() == "\xEF\xBF\xBD");
}

TEST_CASE("text stream: SentencePiece keeps the space of a completion's first word", "[infer][text]") {
  const auto tok = spm();
  std::vector<int32_t> prompt;
  tok->encode("The cat", prompt);
  CHECK(stream(*tok, "The cat sat on the mat", prompt.size()).text == " sat on the mat");
}

TEST_CASE("text stream: UTF-8 helpers", "[infer][text]") {
  CHECK(complete_utf8_length("abc") == 3);
  CHECK(complete_utf8_length("ab\xE2\x82") == 2);          // € cut short
  CHECK(complete_utf8_length("ab\xE2\x82\xAC") == 5);      // €
  CHECK(complete_utf8_length("\xF0\x9F\x98") == 0);        // 😀 cut short
  CHECK(complete_utf8_length("a\x80") == 2);               // a stray continuation byte: nothing to wait for
  CHECK(to_valid_utf8("a\xE2\x82z") == "a\xEF\xBF\xBDz");           // one U+FFFD for a cut character
  CHECK(to_valid_utf8("a\x80\x80z") == "a\xEF\xBF\xBD\xEF\xBF\xBDz");  // one for each stray byte
  CHECK(to_valid_utf8("façade") == "façade");
  // Maximal subparts, as Python's errors="replace": a lead byte whose second byte is out of its
  // range (overlong, surrogate) is a subpart of its own.
  const std::string r = "\xEF\xBF\xBD";
  CHECK(to_valid_utf8("\xE0\x80\x80") == r + r + r);     // overlong
  CHECK(to_valid_utf8("\xED\xA0\x80") == r + r + r);     // a surrogate
  CHECK(to_valid_utf8("\xF0\x9F\x98!") == r + "!");      // 😀 cut short: one
  CHECK(to_valid_utf8("\xF4\x90\x80\x80") == r + r + r + r);  // past U+10FFFF
  CHECK(to_valid_utf8("\xC0\xAF\xFF") == r + r + r);
}

TEST_CASE("outputs: text streams the first unfinished prompt, the others in their turn", "[infer][text]") {
  std::string out;
  int flushes = 0;
  TextOutput o(
      [&](std::string_view s, bool flush) {
        out += s;
        flushes += flush;
      },
      true);
  o.prompt(0, "P0");
  o.prompt(1, "P1");
  o.text(1, "b1");
  o.text(0, "a0");
  CHECK(out == "P0a0");
  o.done(1, {});
  CHECK(out == "P0a0");
  o.text(0, "a1");
  o.done(0, {});
  CHECK(out == "P0a0a1\nP1b1\n");
  o.prompt(2, "P2");
  o.text(2, "c");
  CHECK(out == "P0a0a1\nP1b1\nP2c");
  CHECK(flushes >= 5);
}

TEST_CASE("outputs: JSON lines in prompt order with every field", "[infer][text]") {
  std::vector<std::string> lines;
  JsonlOutput o([&](std::string_view line) { lines.emplace_back(line); });
  o.prompt(0, "zero");
  o.prompt(1, "one");
  o.done(1, {"un", {7, 8}, FinishReason::stop});
  CHECK(lines.empty());
  o.done(0, {"nul", {5}, FinishReason::eod});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] ==
        "{\"id\":0,\"prompt\":\"zero\",\"completion\":\"nul\",\"completion_ids\":[5],\"finish_reason\":\"eod\"}\n");
  const auto j = nlohmann::json::parse(lines[1]);
  CHECK(j["id"] == 1);
  CHECK(j["completion_ids"] == nlohmann::json::array({7, 8}));
  CHECK(j["finish_reason"] == "stop");
}

TEST_CASE("outputs: a prompt that is not UTF-8 is written with replacement characters", "[infer][text]") {
  std::vector<std::string> lines;
  JsonlOutput o([&](std::string_view line) { lines.emplace_back(line); });
  o.prompt(0, "a\xe2\x82");  // the first two bytes of a three-byte character, as token ids may decode
  o.done(0, {"b", {1}, FinishReason::length});
  REQUIRE(lines.size() == 1);
  CHECK(nlohmann::json::parse(lines[0])["prompt"] == "a\xef\xbf\xbd");
}

TEST_CASE("prompts: JSONL lines with their own settings; an empty prompt starts a document", "[infer][text]") {
  TempDir dir;
  const auto tok = spm();
  const std::string path = dir.path("p.jsonl");
  write_file(path, "{\"prompt\": \"The cat\"}\n\n"
                   "{\"prompt\": \"\", \"max_tokens\": 3, \"temperature\": 0.5, \"top_k\": 4, \"top_p\": 0.9, "
                   "\"repetition_penalty\": 1.2, \"seed\": 99, \"stop\": [\"a\", \"b\"]}\n"
                   "{\"prompt\": \"x\", \"stop\": \"z\"}");
  PromptSettings defaults;
  defaults.max_tokens = 10;
  defaults.stop = {"q"};
  const PromptFile f = read_prompt_file(path, defaults, *tok, 16);
  REQUIRE(f.requests.size() == 3);
  CHECK(f.texts == std::vector<std::string>{"The cat", "", "x"});
  CHECK(f.requests[0].max_tokens == 10);
  CHECK(f.requests[0].stop == std::vector<std::string>{"q"});
  CHECK(f.requests[0].sampling.greedy());
  const GenerationRequest& r = f.requests[1];
  CHECK(r.prompt == std::vector<int32_t>{tok->eod_id()});
  CHECK(r.max_tokens == 3);
  CHECK(r.sampling.temperature == 0.5);
  CHECK(r.sampling.top_k == 4);
  CHECK(r.sampling.top_p == 0.9);
  CHECK(r.sampling.repetition_penalty == 1.2);
  CHECK(r.sampling.seed == 99);
  CHECK(r.stop == std::vector<std::string>{"a", "b"});
  CHECK(f.requests[2].stop == std::vector<std::string>{"z"});
}

TEST_CASE("prompts: token ids instead of text", "[infer][text]") {
  TempDir dir;
  const auto tok = spm();
  std::vector<int32_t> ids;
  tok->encode("hello world", ids);
  const std::string path = dir.path("ids.jsonl");
  std::string line = "{\"prompt_ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
  write_file(path, line + "], \"max_tokens\": 2}\n");
  const PromptFile f = read_prompt_file(path, {}, *tok, 64);
  REQUIRE(f.requests.size() == 1);
  CHECK(f.requests[0].prompt == ids);
  CHECK(f.requests[0].max_tokens == 2);
  CHECK(f.texts[0] == tok->decode(ids));
}

TEST_CASE("prompts: a bad line is named by file and line", "[infer][text]") {
  TempDir dir;
  const auto tok = spm();
  const std::string path = dir.path("p.jsonl");
  auto error_of = [&](const std::string& second_line) {
    write_file(path, "{\"prompt\": \"fine\"}\n" + second_line + "\n");
    return input_error_of([&] { read_prompt_file(path, {}, *tok, 8); });
  };
  CHECK(error_of("{\"prompt\": \"x\"").starts_with(path + ":2:15: not valid JSON: "));
  CHECK(error_of("{\"prompt\": \"x\", \"top_p\": 1e400}") == path + ":2:26: number 1e400 is out of range");
  CHECK(error_of("[1]") == path + ":2: expected a JSON object, found array");
  CHECK(error_of("{\"max_tokens\": 3}") == path + ":2: give either \"prompt\" or \"prompt_ids\"");
  CHECK(error_of("{\"prompt\": \"x\", \"prompt_ids\": [1]}") == path + ":2: give either \"prompt\" or \"prompt_ids\"");
  CHECK(error_of("{\"prompt_ids\": 3}") == path + ":2: \"prompt_ids\" must be a list of token ids");
  CHECK(error_of("{\"prompt_ids\": [1, -2]}") == path + ":2: \"prompt_ids\" must be an integer of at least 0");
  CHECK(error_of("{\"prompt_ids\": []}") == path + ":2: the prompt has no tokens");
  CHECK(error_of("{\"prompt_ids\": [1, 100000]}").starts_with(path + ":2: prompt token 100000 is outside"));
  CHECK(error_of("{\"prompt\": 1}") == path + ":2: \"prompt\" must be a string");
  CHECK(error_of("{\"prompt\": \"x\", \"temprature\": 1}").starts_with(path + ":2: unknown key \"temprature\""));
  CHECK(error_of("{\"prompt\": \"x\", \"max_tokens\": 0}") ==
        path + ":2: \"max_tokens\" must be an integer of at least 1");
  CHECK(error_of("{\"prompt\": \"x\", \"top_k\": 1.5}") == path + ":2: \"top_k\" must be an integer of at least 0");
  CHECK(error_of("{\"prompt\": \"x\", \"top_p\": \"high\"}") == path + ":2: \"top_p\" must be a number, not string");
  CHECK(error_of("{\"prompt\": \"x\", \"top_p\": 2}") == path + ":2: top-p 2 must be in (0, 1]");
  CHECK(error_of("{\"prompt\": \"x\", \"seed\": -1}") == path + ":2: \"seed\" must be an integer of at least 0");
  CHECK(error_of("{\"prompt\": \"x\", \"stop\": [1]}") ==
        path + ":2: \"stop\" must be a string or a list of strings");
  CHECK(error_of("{\"prompt\": \"x\", \"stop\": \"\"}") == path + ":2: a stop string is empty");
  CHECK(error_of("{\"prompt\": \"one two three four five six seven eight nine\"}")
            .starts_with(path + ":2: the prompt is "));
  CHECK(error_of("{\"prompt\": \"one two three four five six seven eight nine\"}")
            .ends_with("tokens, more than the 8 a sequence holds (--max-length)"));
}
