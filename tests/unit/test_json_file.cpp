// core/json_file: every JSON problem is one line with the file and the place (line and column, a
// JSONL record's line, or the byte of a binary file), and typed fields name their key.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "core/json_file.hpp"
#include "test_util.hpp"

using namespace meg;

namespace {

std::string problem(std::string_view text, const JsonSource& source) {
  nlohmann::json j;
  return try_parse_json(text, source, j);
}

}  // namespace

TEST_CASE("json: malformed text and overflowing numbers are placed by line and column", "[json]") {
  const JsonSource f("f.json");
  CHECK(problem("{\"a\": [1, 2]}", f).empty());
  // The column of an overflow is where the number starts, in nlohmann's lexer it is where it ends.
  CHECK(problem("{\"a\": 1e400}", f) == "f.json:1:7: number 1e400 is out of range");
  CHECK(problem("{\n  \"a\": 1,\n  \"b\": -1e99999\n}", f) == "f.json:3:8: number -1e99999 is out of range");
  CHECK(problem("[1, 2,\n 3 x]", f).starts_with("f.json:2:4: not valid JSON: syntax error while parsing array"));
  CHECK(problem("", f).starts_with("f.json:1:1: not valid JSON: "));
  CHECK(problem("{\"a\": 1}\n", f).empty());
  CHECK(problem("{\"a\": 1}\n\n x", f).starts_with("f.json:3:2: not valid JSON: "));
  // A huge integer is a finite double, which is not an error.
  CHECK(problem("99999999999999999999999", f).empty());
}

TEST_CASE("json: JSONL records and embedded headers are placed in their file", "[json]") {
  nlohmann::json j;
  CHECK(parse_json_record("{\"t\": 1}", "d.jsonl", 7, j).empty());
  CHECK(j["t"] == 1);
  CHECK(parse_json_record("{\"t\": 1e999}", "d.jsonl", 7, j) == "d.jsonl:7:7: number 1e999 is out of range");
  CHECK(parse_json_record("[1]", "d.jsonl", 7, j) == "d.jsonl:7: expected a JSON object, found array");

  JsonSource header("m.safetensors");
  header.offset = 8;
  header.unique_keys = true;
  CHECK(problem("{\"a\": 1e400}", header) == "m.safetensors: byte 14: number 1e400 is out of range");
  CHECK(problem("{\"a\": {\"b\": 1, \"b\": 2}}", header) == "m.safetensors: key \"b\" appears twice in one object");
  CHECK(problem("{\"a\": {\"b\": 1}, \"c\": {\"b\": 2}}", header).empty());
  header.unique_keys = false;
  CHECK(problem("{\"b\": 1, \"b\": 2}", header).empty());

  // A token of megabytes is not copied into the message whole.
  const std::string long_string = "[\"" + std::string(1 << 20, 'x') + "\\q\"]";
  CHECK(problem(long_string, JsonSource("f.json")).size() < 400);
}

TEST_CASE("json: typed fields name the key and the type found", "[json]") {
  const auto j = nlohmann::json::parse(R"({"n": 3, "neg": -2, "big": 18446744073709551615, "x": 1.5,
                                          "s": "str", "b": true, "z": null})");
  CHECK(json_get<int64_t>(j, "n", "f") == 3);
  CHECK(json_get<double>(j, "n", "f") == 3.0);
  CHECK(json_get<std::string>(j, "s", "f") == "str");
  CHECK(json_get<bool>(j, "b", "f"));
  CHECK(json_get<int>(j, "z", "f", 7) == 7);
  CHECK(json_get<int>(j, "absent", "f", 7) == 7);
  CHECK(json_get<uint64_t>(j, "big", "f") == UINT64_MAX);
  CHECK(input_error_of([&] { json_get<int64_t>(j, "absent", "f"); }) == "f: key 'absent' is missing");
  CHECK(input_error_of([&] { json_get<int64_t>(j, "s", "f"); }) == "f: key 's' must be an integer, not string");
  CHECK(input_error_of([&] { json_get<int64_t>(j, "x", "f"); }) == "f: key 'x' must be an integer, not 1.5");
  CHECK(input_error_of([&] { json_get<int64_t>(j, "big", "f"); }) ==
        "f: key 'big' must be an integer from -9223372036854775808 to 9223372036854775807, not 18446744073709551615");
  CHECK(input_error_of([&] { json_get<uint32_t>(j, "neg", "f"); }) ==
        "f: key 'neg' must be an integer from 0 to 4294967295, not -2");
  CHECK(input_error_of([&] { json_get<double>(j, "b", "f"); }) == "f: key 'b' must be a number, not boolean");
  CHECK(input_error_of([&] { json_get<bool>(j, "n", "f"); }) == "f: key 'n' must be true or false, not number");
  CHECK(input_error_of([&] { json_get<std::string>(j, "z", "f"); }) == "f: key 'z' must be a string, not null");
  CHECK(input_error_of([&] { json_get<int>(j["n"], "k", "f"); }) == "f: expected a JSON object, found number");
}
