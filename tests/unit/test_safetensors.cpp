// safetensors files: round trips, byte-exact agreement with the reference writer's output, and a
// real bad file for every check the reader makes.
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "catch.hpp"
#include "ckpt/safetensors.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float f : values) {
    char b[4];
    std::memcpy(b, &f, 4);
    s.append(b, 4);
  }
  return s;
}

// A file with header JSON (unpadded unless the caller pads it) and data bytes.
std::string make_file(const std::string& json, const std::string& data) { return le64(json.size()) + json + data; }

// The one-line message of the InputError that reading PATH throws, or "" when it reads fine.
std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string span_string(std::span<const uint8_t> s) { return {reinterpret_cast<const char*>(s.data()), s.size()}; }

}  // namespace

TEST_CASE("safetensors dtypes have the reference names and sizes", "[ckpt]") {
  CHECK(dtype_name(SafetensorsDtype::kBF16) == "BF16");
  CHECK(dtype_name(SafetensorsDtype::kBool) == "BOOL");
  CHECK(dtype_size(SafetensorsDtype::kF64) == 8);
  CHECK(dtype_size(SafetensorsDtype::kF32) == 4);
  CHECK(dtype_size(SafetensorsDtype::kF16) == 2);
  CHECK(dtype_size(SafetensorsDtype::kBF16) == 2);
  CHECK(dtype_size(SafetensorsDtype::kI64) == 8);
  CHECK(dtype_size(SafetensorsDtype::kI32) == 4);
  CHECK(dtype_size(SafetensorsDtype::kI16) == 2);
  CHECK(dtype_size(SafetensorsDtype::kI8) == 1);
  CHECK(dtype_size(SafetensorsDtype::kU8) == 1);
  CHECK(dtype_size(SafetensorsDtype::kBool) == 1);
  for (const char* name : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "U16", "U32",
                           "U64", "F8_E5M2", "F8_E4M3"}) {
    const auto d = parse_dtype(name);
    REQUIRE(d);
    CHECK(dtype_name(*d) == name);
  }
  CHECK_FALSE(parse_dtype("f32"));
  CHECK_FALSE(parse_dtype("F128"));
}

TEST_CASE("safetensors files round-trip tensors of every dtype and shape, streamed in chunks", "[ckpt]") {
  TempDir dir;
  struct T {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<uint64_t> shape;
    std::string bytes;
  };
  std::vector<T> ts;
  auto add = [&](std::string name, SafetensorsDtype d, std::vector<uint64_t> shape) {
    uint64_t n = dtype_size(d);
    for (auto s : shape) n *= s;
    ts.push_back({std::move(name), d, std::move(shape), random_bytes(n, static_cast<uint32_t>(ts.size() + 7))});
  };
  add("model.embed.weight", SafetensorsDtype::kF32, {7, 3});
  add("h.0.ln.bias", SafetensorsDtype::kBF16, {5});
  add("step", SafetensorsDtype::kI64, {});  // a scalar
  add("empty", SafetensorsDtype::kU8, {0, 5});  // zero elements
  add("mask", SafetensorsDtype::kBool, {3});
  add("x64", SafetensorsDtype::kF64, {2, 1, 2});
  add("ids", SafetensorsDtype::kI32, {1, 1});
  add("i16", SafetensorsDtype::kI16, {3});
  add("i8", SafetensorsDtype::kI8, {5});
  add("half", SafetensorsDtype::kF16, {2, 2});
  add("also empty", SafetensorsDtype::kF32, {0});
  const SafetensorsMetadata meta = {{"format", "pt"}, {"meg.iteration", "1200"}, {"note", "quote \" tab\t é"}};

  const std::string path = dir.path("model.safetensors");
  SafetensorsWriter w(path, meta);
  for (const auto& t : ts) w.declare(t.name, t.dtype, t.shape);
  w.write_header();
  REQUIRE(w.order().size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CHECK(w.order()[i] == ts[i].name);  // declaration order
    const std::string& b = ts[i].bytes;
    for (size_t at = 0; at < b.size(); at += 5) w.write(ts[i].name, b.data() + at, std::min<size_t>(5, b.size() - at));
  }
  CHECK_FALSE(std::filesystem::exists(path));  // nothing under the final name before commit
  const uint64_t xxh = w.commit();
  const std::string whole = read_file(path);
  CHECK(xxh == xxh64(whole.data(), whole.size()));
  CHECK(w.bytes_written() == whole.size());

  SafetensorsFile f(path);
  CHECK(f.header_size() % 8 == 0);
  CHECK(f.data_offset() % 8 == 0);
  CHECK(f.metadata() == meta);
  CHECK(f.checksum() == xxh);
  CHECK_NOTHROW(f.verify_checksum(xxh));
  CHECK_THROWS_WITH(f.verify_checksum(xxh ^ 1), ContainsSubstring(path) && ContainsSubstring("checksum mismatch"));
  std::vector<std::string> names;
  for (const auto& t : ts) names.push_back(t.name);
  CHECK(f.names() == names);
  for (const auto& t : ts) {
    const auto& r = f.tensor(t.name);
    CHECK(r.dtype == t.dtype);
    CHECK(r.shape == t.shape);
    CHECK(span_string(r.bytes) == t.bytes);
    CHECK(r.bytes.size() == r.numel() * dtype_size(r.dtype));
  }
  CHECK(f.tensor("step").shape.empty());
  CHECK(f.tensor("step").numel() == 1);
  CHECK(f.tensor("empty").bytes.empty());
  CHECK_FALSE(f.contains("nope"));
  CHECK_THROWS_WITH(f.tensor("nope"), ContainsSubstring(path) && ContainsSubstring("no tensor named \"nope\""));

  // The one-shot form writes the same bytes.
  std::vector<SafetensorsInput> in;
  for (const auto& t : ts) in.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  CHECK(write_safetensors(dir.path("again.safetensors"), in, meta) == xxh);
  CHECK(read_file(dir.path("again.safetensors")) == whole);
}

TEST_CASE("safetensors headers are padded so the data starts 8-byte aligned", "[ckpt]") {
  TempDir dir;
  const std::string data = f32_bytes({1.5f});
  for (size_t len = 1; len <= 16; ++len) {
    const std::string name(len, 'w');
    const std::string path = dir.path(std::to_string(len) + ".safetensors");
    write_safetensors(path, {{name, SafetensorsDtype::kF32, {1}, data.data()}});
    const std::string bytes = read_file(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    CHECK(n % 8 == 0);
    CHECK(bytes.size() == 8 + n + 4);
    const std::string header = bytes.substr(8, n);
    const size_t close = header.rfind('}');
    CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // only spaces after the JSON
    CHECK(n - (close + 1) < 8);
    SafetensorsFile f(path);
    CHECK(span_string(f.tensor(name).bytes) == data);
  }
}

TEST_CASE("safetensors writer output is byte-identical to the reference writer's", "[ckpt]") {
  TempDir dir;
  const std::string p = dir.path("x.safetensors");
  const std::string floats = f32_bytes({0, 1, 2, 3, 4, 5});

  SECTION("one F32 tensor, header exactly 64 bytes, no padding") {
    const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(json.size() == 64);
    const std::string expected = std::string("\x40\0\0\0\0\0\0\0", 8) + json + floats;
    write_safetensors(p, {{"attn.0", SafetensorsDtype::kF32, {1, 2, 3}, floats.data()}});
    CHECK(read_file(p) == expected);
    // The first data bytes as the reference's test spells them: 0.0f then 1.0f = 00 00 80 3f.
    CHECK(expected.substr(72, 8) == std::string("\0\0\0\0\0\0\x80\x3f", 8));
  }
  SECTION("one F32 tensor, header padded with 7 spaces to 72 bytes") {
    const std::string json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(json.size() == 65);
    const std::string expected = le64(72) + json + "       " + floats;
    write_safetensors(p, {{"attn0", SafetensorsDtype::kF32, {1, 1, 2, 3}, floats.data()}});
    CHECK(read_file(p) == expected);
  }
  SECTION("no tensors, with and without metadata") {
    write_safetensors(p, {});
    CHECK(read_file(p) == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
    write_safetensors(p, {}, {{"framework", "pt"}});
    CHECK(read_file(p) == le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
    SafetensorsFile f(p);
    CHECK(f.names().empty());
    CHECK(f.metadata().at("framework") == "pt");
  }
  SECTION("reference order: by dtype alignment, largest first, then by name") {
    const std::string b = f32_bytes({2, 3}), a = f32_bytes({1});
    const std::string c = "\x01\x02\x03", d = std::string("\x07\0\0\0\0\0\0\0", 8);
    const uint64_t xxh = write_safetensors(p,
                                           {{"b", SafetensorsDtype::kF32, {2}, b.data()},
                                            {"c", SafetensorsDtype::kU8, {3}, c.data()},
                                            {"d", SafetensorsDtype::kI64, {}, d.data()},
                                            {"a", SafetensorsDtype::kF32, {1}, a.data()}},
                                           {{"format", "pt"}}, SafetensorsWriter::Order::kReference);
    const std::string json = std::string("{") + R"("__metadata__":{"format":"pt"},)" +
                             R"("d":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)" +
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)" +
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)" +
                             R"("c":{"dtype":"U8","shape":[3],"data_offsets":[20,23]})" + "}";
    REQUIRE(json.size() == 247);
    const std::string expected = le64(248) + json + " " + d + a + b + c;
    const std::string got = read_file(p);
    CHECK(got == expected);
    CHECK(xxh == xxh64(expected.data(), expected.size()));
    CHECK(SafetensorsFile(p).names() == std::vector<std::string>{"d", "a", "b", "c"});
  }
}

TEST_CASE("safetensors reader takes files with any header order and padding", "[ckpt]") {
  TempDir dir;
  const std::string p = dir.path("other.safetensors");
  // Header order unlike data order, a U64 header length not padded to 8, metadata last.
  write_file(p, make_file(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
                          R"( "a" : {"shape":[1],"data_offsets":[0,1],"dtype":"I8"},"__metadata__":{}})",
                          "xyz"));
  SafetensorsFile f(p);
  CHECK(f.names() == std::vector<std::string>{"a", "b"});
  CHECK(span_string(f.tensor("a").bytes) == "x");
  CHECK(span_string(f.tensor("b").bytes) == "yz");
  CHECK(f.metadata().empty());
}

TEST_CASE("safetensors reader names the file and the problem for every malformed file", "[ckpt]") {
  TempDir dir;
  const std::string p = dir.path("bad.safetensors");
  auto bad = [&](const std::string& bytes, const std::string& problem) {
    write_file(p, bytes);
    const std::string msg = error_of(p);
    INFO(msg);
    CHECK_THAT(msg, ContainsSubstring(p + ": ") && ContainsSubstring(problem));
    CHECK(msg.find('\n') == std::string::npos);
  };
  const std::string t4 = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";

  bad("", "0 bytes, shorter than the 8-byte header length");
  bad("abcde", "5 bytes, shorter than the 8-byte header length");
  bad(le64(200'000'000) + "{}", "header length 200000000 is larger than the 100000000-byte limit");
  bad(le64(uint64_t(-1)), "is larger than");
  bad(le64(100) + "{}", "header length 100 runs past the end of the file (10 bytes");
  bad(make_file(R"({"a":)", ""), "byte 13: not valid JSON");
  bad(make_file("{\"a\xff\":1}", ""), "byte 11: not valid JSON");
  bad(make_file("", ""), "byte 8: not valid JSON");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", "abcd"),
      "byte 37: number 1e400 is out of range");
  bad(make_file("[1,2]", ""), "header is array, not a JSON object");
  bad(make_file("\"x\"", ""), "header is string, not a JSON object");
  bad(make_file(R"({"a":[0,4]})", "abcd"), "tensor \"a\": entry is array, not an object");
  bad(make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "abcd"), "tensor \"a\": no dtype");
  bad(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"), "tensor \"a\": no shape");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"), "tensor \"a\": no data_offsets");
  bad(make_file(R"({"a":{)" + t4 + R"(,"offset":0}})", "abcd"), "tensor \"a\": unexpected field \"offset\"");
  bad(make_file(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, 'x')),
      "tensor \"a\": unknown dtype \"F128\"");
  bad(make_file(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"), "tensor \"a\": dtype is a non-negative integer, not a string");
  bad(make_file(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", "abcd"),
      "tensor \"a\": shape is a non-negative integer, not an array of non-negative integers");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
      "shape holds a negative integer, not a non-negative integer");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
      "shape holds a fraction");
  bad(make_file(R"({"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", "abcd"), "shape holds string");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", "abcd"),
      "tensor \"a\": data_offsets is not [begin, end] with non-negative integers: [4]");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd"),
      "data_offsets is not [begin, end]");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", "abcd"),
      "data_offsets is not [begin, end]");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"),
      "data_offsets is not [begin, end]");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":{"b":0}}})", "abcd"),
      "data_offsets is not [begin, end]");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "abcd"),
      "tensor \"a\": data_offsets [4, 0] end before they begin");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", "abcdefgh"),
      "tensor \"a\": data_offsets [0, 12] run past the end of the 8-byte data section (truncated file?)");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
      "tensor \"a\": data_offsets [0, 4] hold 4 bytes but F32 [2] needs 8");
  bad(make_file(R"({"a":{"dtype":"BF16","shape":[],"data_offsets":[0,4]}})", "abcd"),
      "hold 4 bytes but BF16 [] needs 2");
  bad(make_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      "tensor \"a\": shape [4294967296, 4294967296] of F64 overflows 64 bits");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                std::string(12, 'x')),
      "data bytes [4, 8) belong to no tensor (gap before tensor \"b\")");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
      "data bytes [0, 4) belong to no tensor (gap before tensor \"a\")");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                std::string(8, 'x')),
      "tensor \"b\" at [4, 8) overlaps tensor \"a\" at [0, 8)");
  bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                std::string(4, 'x')),
      "overlaps tensor");
  bad(make_file(R"({"a":{)" + t4 + "}}", "abcdEXTRA"), "data bytes [4, 9) after the last tensor belong to no tensor");
  bad(make_file(R"({"a":{)" + t4 + R"(},"a":{)" + t4 + "}}", "abcd"), "key \"a\" appears twice in one object");
  bad(make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd"),
      "key \"dtype\" appears twice in one object");
  bad(make_file(R"({"__metadata__":{"k":1},"a":{)" + t4 + "}}", "abcd"),
      "__metadata__ \"k\": value is a non-negative integer, not a string");
  bad(make_file(R"({"__metadata__":{"k":{"x":"y"}}})", ""), "__metadata__ \"k\": value is object, not a string");
  bad(make_file(R"({"__metadata__":["x"]})", ""), "__metadata__ is array, not an object");
  bad(make_file("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", ""),
      "tensor \"a\\nb\": unknown dtype");  // names are escaped: one line

  // A whole file cut short, as a torn copy would be.
  const std::string floats = f32_bytes({1, 2, 3, 4});
  write_safetensors(dir.path("good"), {{"w", SafetensorsDtype::kF32, {2, 2}, floats.data()}});
  const std::string whole = read_file(dir.path("good"));
  bad(whole.substr(0, whole.size() - 1), "tensor \"w\": data_offsets [0, 16] run past the end of the 15-byte");
  bad(whole.substr(0, 20), "header length 64 runs past the end of the file");
  bad(whole.substr(0, 7), "shorter than the 8-byte header length");

  CHECK_THROWS_WITH(SafetensorsFile(dir.path("missing")), ContainsSubstring(dir.path("missing")));
}

TEST_CASE("safetensors writer refuses misuse and leaves nothing behind without commit", "[ckpt]") {
  TempDir dir;
  const std::string p = dir.path("w.safetensors");
  const std::string four = "abcd";
  {
    SafetensorsWriter w(p);
    w.declare("a", SafetensorsDtype::kF32, {1});
    CHECK_THROWS_AS(w.declare("a", SafetensorsDtype::kF32, {1}), std::logic_error);
    CHECK_THROWS_AS(w.declare("__metadata__", SafetensorsDtype::kF32, {1}), std::logic_error);
    CHECK_THROWS_AS(w.declare("bad\xff", SafetensorsDtype::kF32, {1}), std::logic_error);
    w.declare("z", SafetensorsDtype::kU8, {0});
    w.declare("b", SafetensorsDtype::kU8, {4});
    CHECK_THROWS_AS(w.write("a", four.data(), 4), std::logic_error);  // before the header
    w.write_header();
    CHECK_THROWS_AS(w.declare("c", SafetensorsDtype::kU8, {1}), std::logic_error);
    CHECK_THROWS_AS(w.write("b", four.data(), 4), std::logic_error);  // "a" not whole yet
    CHECK_THROWS_AS(w.write("nope", four.data(), 4), std::logic_error);
    w.write("a", four.data(), 2);
    CHECK_THROWS_AS(w.write("a", four.data(), 3), std::logic_error);  // more than it holds
    CHECK_THROWS_AS(w.commit(), std::logic_error);                     // not whole
    w.write("a", four.data() + 2, 2);
    w.write("b", four.data(), 4);  // skips the zero-size "z"
    CHECK_THROWS_AS(w.write("a", four.data(), 0), std::logic_error);  // already behind us
  }  // destroyed without commit
  CHECK_FALSE(std::filesystem::exists(p));
  CHECK(std::filesystem::is_empty(std::filesystem::path(p).parent_path()));

  SafetensorsWriter w(p);
  w.declare("a", SafetensorsDtype::kF32, {1});
  w.write_header();
  w.write("a", four.data(), 4);
  const uint64_t xxh = w.commit();
  SafetensorsFile f(p);
  CHECK(f.checksum() == xxh);
  CHECK(span_string(f.tensor("a").bytes) == four);
}
