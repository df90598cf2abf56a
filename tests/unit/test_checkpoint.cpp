// Native checkpoint directories: round trips, `latest`, pruning, crash leftovers, and a real
// damaged file on disk for every check the loader makes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

struct Tensors {
  std::vector<float> wte, bias;
  std::vector<uint16_t> half;
  std::vector<int64_t> step;
  std::vector<float> m, v;

  explicit Tensors(float base) {
    for (int i = 0; i < 12; ++i) wte.push_back(base + 0.25f * static_cast<float>(i) - 1.0f);
    for (int i = 0; i < 3; ++i) bias.push_back(base - 0.5f * static_cast<float>(i) + 0.125f);
    for (int i = 0; i < 6; ++i) half.push_back(static_cast<uint16_t>(0x3c00 + 17 * i + static_cast<int>(base)));
    step.push_back(static_cast<int64_t>(base) + 7);
    for (int i = 0; i < 12; ++i) m.push_back(0.01f * static_cast<float>(i + 1) + base);
    for (int i = 0; i < 12; ++i) v.push_back(0.001f * static_cast<float>(i + 3) + base);
  }

  std::map<std::string, std::vector<CheckpointTensor>> files() const {
    return {
        {"model.safetensors",
         {{"wte", SafetensorsDtype::kF32, {4, 3}, wte.data()},
          {"bias", SafetensorsDtype::kF32, {3}, bias.data()},
          {"half", SafetensorsDtype::kBF16, {2, 3}, half.data()}}},
        {"optimizer.safetensors",
         {{"step", SafetensorsDtype::kI64, {}, step.data()},
          {"wte.exp_avg", SafetensorsDtype::kF32, {4, 3}, m.data()},
          {"wte.exp_avg_sq", SafetensorsDtype::kF32, {4, 3}, v.data()}}},
    };
  }
};

nlohmann::ordered_json make_record(int64_t iteration) {
  nlohmann::ordered_json r;
  r["model"] = {{"family", "gpt"}, {"hidden_size", 3}, {"num_layers", 1}};
  r["options"] = {{"lr", 3e-4}, {"seq_length", 8}, {"micro_batch_size", 2}};
  r["consumed_samples"] = iteration * 16;
  r["data_position"] = {{"epoch", 0}, {"sample", iteration * 16}};
  r["rng"] = {{"seed", 1234}, {"state", "0123456789abcdef0123"}};
  r["layout"] = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"cp", 1}, {"ep", 1}};
  return r;
}

std::string save(const std::string& dir, int64_t iteration, CheckpointSaveOptions options = {}) {
  Tensors t(static_cast<float>(iteration % 97));
  return save_checkpoint(dir, iteration, make_record(iteration), t.files(), options);
}

std::vector<float> floats(const SafetensorsTensor& t) {
  std::vector<float> out(t.bytes.size() / 4);
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

std::string trimmed_file(const std::string& path) {
  std::string s = read_file(path);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void edit_json(const std::string& path, const std::function<void(nlohmann::ordered_json&)>& f) {
  auto j = nlohmann::ordered_json::parse(read_file(path));
  f(j);
  write_file(path, j.dump(2));
}

std::string load_error(const std::string& path) {
  return input_error_of([&] { load_checkpoint(path); });
}

}  // namespace

TEST_CASE("checkpoint directory names", "[ckpt]") {
  CHECK(checkpoint_dir_name(100) == "iter_0000100");
  CHECK(checkpoint_dir_name(0) == "iter_0000000");
  CHECK(checkpoint_dir_name(123456789) == "iter_123456789");
  CHECK(parse_checkpoint_dir_name("iter_0000100") == 100);
  CHECK(parse_checkpoint_dir_name("iter_123456789") == 123456789);
  CHECK_FALSE(parse_checkpoint_dir_name("iter_100"));
  CHECK_FALSE(parse_checkpoint_dir_name("iter_00000100"));  // one spelling per iteration
  CHECK_FALSE(parse_checkpoint_dir_name("iter_000010x"));
  CHECK_FALSE(parse_checkpoint_dir_name(".iter_0000100.tmp-12"));
  CHECK_FALSE(parse_checkpoint_dir_name("latest"));
}

TEST_CASE("checkpoint save and load round trip", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  Tensors t(2.0f);
  const auto record = make_record(100);
  const std::string path = save_checkpoint(dir, 100, record, t.files());
  CHECK(path == dir + "/iter_0000100");
  CHECK(trimmed_file(dir + "/latest") == "iter_0000100");
  CHECK(read_file(dir + "/latest") == "iter_0000100\n");
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000100", "latest"});
  CHECK(dir_names(path) == std::vector<std::string>{"checkpoint.json", "model.safetensors", "optimizer.safetensors"});

  // The record on disk is the documented one.
  const auto j = nlohmann::json::parse(read_file(path + "/checkpoint.json"));
  CHECK(j["format"] == "meg-checkpoint");
  CHECK(j["version"] == 1);
  CHECK(j["iteration"] == 100);
  CHECK(j["files"]["model.safetensors"]["bytes"] == fs::file_size(path + "/model.safetensors"));
  CHECK(j["files"]["model.safetensors"]["xxh64"] == hex64(SafetensorsFile(path + "/model.safetensors").checksum()));

  for (const std::string& from : {dir, path, path + "/"}) {
    INFO(from);
    const Checkpoint ck = load_checkpoint(from);
    CHECK(ck.path() == path);
    CHECK(ck.iteration() == 100);
    CHECK(ck.record() == record);
    CHECK(ck.record()["layout"]["tp"] == 1);
    CHECK(ck.file_names() == std::vector<std::string>{"model.safetensors", "optimizer.safetensors"});
    CHECK(floats(ck.tensor("model.safetensors", "wte", SafetensorsDtype::kF32, {4, 3})) == t.wte);
    CHECK(floats(ck.tensor("model.safetensors", "bias", SafetensorsDtype::kF32, {3})) == t.bias);
    const auto& half = ck.tensor("model.safetensors", "half", SafetensorsDtype::kBF16, {2, 3});
    CHECK(std::memcmp(half.bytes.data(), t.half.data(), 12) == 0);
    const auto& step = ck.tensor("optimizer.safetensors", "step", SafetensorsDtype::kI64, {});
    int64_t s = 0;
    std::memcpy(&s, step.bytes.data(), 8);
    CHECK(s == t.step[0]);
    CHECK(floats(ck.tensor("optimizer.safetensors", "wte.exp_avg_sq")) == t.v);
  }

  // A plain nlohmann::json record works too.
  nlohmann::json plain = {{"a", 1}, {"b", {1, 2, 3}}};
  save_checkpoint(dir, 101, plain, {});
  CHECK(load_checkpoint(dir).record() == nlohmann::ordered_json(plain));
  CHECK(load_checkpoint(dir).file_names().empty());
}

TEST_CASE("checkpoint writer streams tensors in pieces", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  std::vector<float> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5f * static_cast<float>(i) - 3.0f;
  {
    CheckpointWriter w(dir, 7);
    CHECK(fs::is_directory(w.temp_path()));
    SafetensorsWriter& f = w.file("model.safetensors", {{"format", "pt"}});
    f.declare("big", SafetensorsDtype::kF32, {10, 100});
    f.write_header();
    for (size_t at = 0; at < big.size(); at += 300)
      f.write("big", big.data() + at, std::min<size_t>(300, big.size() - at) * 4);
    CHECK_FALSE(fs::exists(dir + "/iter_0000007"));
    CHECK(w.commit({{"note", "streamed"}}) == dir + "/iter_0000007");
    CHECK_FALSE(fs::exists(w.temp_path()));
  }
  const Checkpoint ck = load_checkpoint(dir);
  CHECK(floats(ck.tensor("model.safetensors", "big", SafetensorsDtype::kF32, {10, 100})) == big);
  CHECK(ck.file("model.safetensors").metadata().at("format") == "pt");

  // A writer dropped before commit leaves nothing behind.
  std::string temp;
  {
    CheckpointWriter w(dir, 8);
    temp = w.temp_path();
    Tensors t(1.0f);
    w.write_file("model.safetensors", t.files().at("model.safetensors"));
  }
  CHECK_FALSE(fs::exists(temp));
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000007", "latest"});

  // Misuse by the caller.
  CheckpointWriter w(dir, 9);
  CHECK_THROWS_AS(w.file("../model.safetensors"), std::invalid_argument);
  CHECK_THROWS_AS(w.file("checkpoint.json"), std::invalid_argument);
  CHECK_THROWS_AS(w.file(".hidden.safetensors"), std::invalid_argument);
  w.file("a.safetensors");
  CHECK_THROWS_AS(w.file("a.safetensors"), std::invalid_argument);
}

TEST_CASE("checkpoint files written by other processes join the record", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  const Tensors a(2.0f), b(5.0f);
  {
    CheckpointWriter w(dir, 3);
    // As two ranks would: each writes its shard into the writer's temporary directory.
    const CheckpointFileInfo one = write_checkpoint_file(w.temp_path(), "model-rank0.safetensors", a.files().at("model.safetensors"));
    const CheckpointFileInfo two = write_checkpoint_file(w.temp_path(), "model-rank1.safetensors", b.files().at("model.safetensors"));
    w.add_file(one);
    w.add_file(two);
    CHECK_THROWS_AS(w.add_file(one), std::invalid_argument);  // listed twice
    CHECK_THROWS_AS(w.add_file({"missing.safetensors", 0, 10}), InputError);
    CheckpointFileInfo wrong = two;
    wrong.name = "model-rank2.safetensors";
    CHECK_THROWS_AS(w.add_file(wrong), InputError);  // not written
    w.commit({{"note", "sharded"}});
  }
  const Checkpoint ck = load_checkpoint(dir);
  CHECK(floats(ck.tensor("model-rank0.safetensors", "wte", SafetensorsDtype::kF32, {4, 3})) == a.wte);
  CHECK(floats(ck.tensor("model-rank1.safetensors", "wte", SafetensorsDtype::kF32, {4, 3})) == b.wte);

  // A size that does not match what was written is refused.
  CheckpointWriter w(dir, 4);
  CheckpointFileInfo info = write_checkpoint_file(w.temp_path(), "model.safetensors", a.files().at("model.safetensors"));
  info.bytes += 1;
  CHECK_THAT(input_error_of([&] { w.add_file(info); }), ContainsSubstring("bytes where its writer reported"));
}

TEST_CASE("checkpoint latest names the newest and keep prunes the oldest", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  for (int64_t it : {100, 200, 300}) {
    save(dir, it);
    CHECK(trimmed_file(dir + "/latest") == checkpoint_dir_name(it));
    CHECK(find_latest(dir) == dir + "/" + checkpoint_dir_name(it));
    CHECK(load_checkpoint(dir).iteration() == it);
  }
  CHECK(list_checkpoints(dir).size() == 3);

  save(dir, 400, {.keep = 2});
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000300", "iter_0000400", "latest"});
  save(dir, 500, {.keep = 2});
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000400", "iter_0000500", "latest"});
  CHECK(load_checkpoint(dir).iteration() == 500);
  CHECK(load_checkpoint(dir + "/iter_0000400").iteration() == 400);

  // keep 1 leaves only the new one; the one just written stays even when it is not the highest.
  save(dir, 50, {.keep = 2});
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000050", "iter_0000500", "latest"});
  CHECK(load_checkpoint(dir).iteration() == 50);
  save(dir, 20, {.keep = 1});
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000020", "latest"});

  // keep 0 keeps all.
  save(dir, 30);
  save(dir, 40, {.keep = 0});
  CHECK(list_checkpoints(dir).size() == 3);
}

TEST_CASE("checkpoint of an existing iteration is refused unless overwrite", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  save(dir, 100);
  const std::string before = read_file(dir + "/iter_0000100/model.safetensors");
  CHECK_THAT(input_error_of([&] { save(dir, 100); }),
             ContainsSubstring("iter_0000100: checkpoint of iteration 100 already exists"));
  CHECK(read_file(dir + "/iter_0000100/model.safetensors") == before);
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000100", "latest"});

  Tensors t(5.0f);
  save_checkpoint(dir, 100, make_record(100), t.files(), {.overwrite = true});
  CHECK(dir_names(dir) == std::vector<std::string>{"iter_0000100", "latest"});
  CHECK(floats(load_checkpoint(dir).tensor("model.safetensors", "wte", SafetensorsDtype::kF32, {4, 3})) == t.wte);
}

TEST_CASE("checkpoint leftovers of crashed saves are never loaded", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  save(dir, 100);
  save(dir, 200);

  // A save that crashed before its rename: a whole-looking temporary directory.
  fs::copy(dir + "/iter_0000200", dir + "/.iter_0000400.tmp-99999");
  // A directory with the right name but no checkpoint.json (a damaged or half-copied tree).
  fs::copy(dir + "/iter_0000200", dir + "/iter_0000300");
  fs::remove(dir + "/iter_0000300/checkpoint.json");

  CHECK(find_latest(dir) == dir + "/iter_0000200");
  CHECK(load_checkpoint(dir).iteration() == 200);
  fs::remove(dir + "/latest");  // without latest: the highest complete one
  CHECK(find_latest(dir) == dir + "/iter_0000200");
  CHECK(load_checkpoint(dir).iteration() == 200);
  CHECK(list_checkpoints(dir).size() == 2);
  CHECK_THAT(load_error(dir + "/iter_0000300"),
             ContainsSubstring("iter_0000300: incomplete checkpoint: it has no checkpoint.json"));

  // `latest` naming the incomplete one is refused, not worked around.
  write_file(dir + "/latest", "iter_0000300\n");
  CHECK_THAT(load_error(dir), ContainsSubstring("latest: names iter_0000300, which is incomplete"));

  // The next save removes the leftover temporary directory.
  save(dir, 500);
  CHECK_FALSE(fs::exists(dir + "/.iter_0000400.tmp-99999"));
  CHECK(load_checkpoint(dir).iteration() == 500);
}

TEST_CASE("checkpoint loading refuses damaged checkpoints", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt");
  const std::string path = save(dir, 100);
  const std::string model = path + "/model.safetensors";
  const std::string record = path + "/checkpoint.json";
  const std::string good_model = read_file(model);
  const std::string good_record = read_file(record);
  auto restore = [&] {
    write_file(model, good_model);
    write_file(record, good_record);
    write_file(dir + "/latest", "iter_0000100\n");
  };
  REQUIRE(load_checkpoint(dir).iteration() == 100);

  SECTION("a flipped byte in the data") {
    std::string bad = good_model;
    bad[bad.size() - 5] ^= 0x10;
    write_file(model, bad);
    const std::string e = load_error(dir);
    CHECK_THAT(e, ContainsSubstring(model + ": checksum mismatch"));
    CHECK(e.find('\n') == std::string::npos);
    // Without checksum verification the damage is not seen; the sizes and headers still are.
    CHECK(load_checkpoint(dir, {.checksum_file = {}, .verify_checksums = false}).iteration() == 100);
  }
  SECTION("a flipped byte in the header") {
    std::string bad = good_model;
    bad[10] ^= 0x01;
    write_file(model, bad);
    CHECK_THAT(load_error(dir), ContainsSubstring(model + ": checksum mismatch"));
  }
  SECTION("a truncated file") {
    write_file(model, good_model.substr(0, good_model.size() - 4));
    CHECK_THAT(load_error(dir), ContainsSubstring(model + ": truncated: " + std::to_string(good_model.size() - 4) +
                                                  " bytes, " + std::to_string(good_model.size()) + " recorded"));
  }
  SECTION("a longer file") {
    write_file(model, good_model + "x");
    CHECK_THAT(load_error(dir), ContainsSubstring(model + ": " + std::to_string(good_model.size() + 1) +
                                                  " bytes, longer than the"));
  }
  SECTION("a missing file") {
    fs::remove(path + "/optimizer.safetensors");
    CHECK_THAT(load_error(dir), ContainsSubstring(path + "/optimizer.safetensors: missing file"));
  }
  SECTION("checkpoint.json that is not JSON") {
    write_file(record, good_record.substr(0, good_record.size() / 2));
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ":") && ContainsSubstring(": not valid JSON"));
    write_file(record, "");
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ":1:1: not valid JSON"));
  }
  SECTION("checkpoint.json of another format or version") {
    edit_json(record, [](auto& j) { j["version"] = 2; });
    CHECK_THAT(load_error(dir),
               ContainsSubstring(record + ": checkpoint format version 2 is not supported (this meg reads version 1)"));
    restore();
    edit_json(record, [](auto& j) { j["format"] = "megatron"; });
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ": not a meg checkpoint record"));
    restore();
    write_file(record, "[1, 2]");
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ": not a JSON object"));
  }
  SECTION("checkpoint.json with bad fields") {
    edit_json(record, [](auto& j) { j["iteration"] = 200; });
    CHECK_THAT(load_error(dir), ContainsSubstring("records iteration 200 but its directory is named for iteration 100"));
    restore();
    edit_json(record, [](auto& j) { j["iteration"] = -1; });
    CHECK_THAT(load_error(dir), ContainsSubstring("\"iteration\" is not a non-negative integer"));
    restore();
    edit_json(record, [](auto& j) { j["files"]["model.safetensors"]["xxh64"] = "zz"; });
    CHECK_THAT(load_error(dir), ContainsSubstring("file \"model.safetensors\": \"xxh64\" is not 16"));
    restore();
    edit_json(record, [](auto& j) { j["files"]["../../etc/passwd"] = j["files"]["model.safetensors"]; });
    CHECK_THAT(load_error(dir), ContainsSubstring("is not a plain file name"));
    restore();
    edit_json(record, [](auto& j) { j.erase("record"); });
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ": no \"record\""));
    restore();
    edit_json(record, [](auto& j) { j.erase("files"); });
    CHECK_THAT(load_error(dir), ContainsSubstring(record + ": no \"files\" object"));
  }
  SECTION("a replaced file of the same size") {
    // Another valid safetensors file with the same layout but other values.
    Tensors other(9.0f);
    save_checkpoint(tmp.path("other"), 100, make_record(100), other.files());
    const std::string replacement = read_file(tmp.path("other") + "/iter_0000100/model.safetensors");
    REQUIRE(replacement.size() == good_model.size());
    write_file(model, replacement);
    CHECK_THAT(load_error(dir), ContainsSubstring(model + ": checksum mismatch"));
  }
  SECTION("latest naming a missing directory") {
    write_file(dir + "/latest", "iter_0000900\n");
    CHECK_THAT(load_error(dir), ContainsSubstring(dir + "/latest: names iter_0000900, which does not exist"));
    CHECK_THAT(input_error_of([&] { find_latest(dir); }), ContainsSubstring("which does not exist"));
    write_file(dir + "/latest", "../elsewhere\n");
    CHECK_THAT(load_error(dir), ContainsSubstring("latest: names \"../elsewhere\", not a checkpoint directory"));
    write_file(dir + "/latest", "");
    CHECK_THAT(load_error(dir), ContainsSubstring("latest: names \"\", not a checkpoint directory"));
  }
  SECTION("no checkpoint at all") {
    CHECK_THAT(load_error(tmp.path("nothing")), ContainsSubstring("nothing: no such checkpoint directory"));
    fs::create_directory(tmp.path("empty"));
    CHECK_THAT(load_error(tmp.path("empty")), ContainsSubstring("empty: no checkpoint"));
  }
  SECTION("a tensor of another shape or dtype, or absent") {
    const Checkpoint ck = load_checkpoint(dir);
    CHECK_THAT(input_error_of([&] { ck.tensor("model.safetensors", "wte", SafetensorsDtype::kF32, {3, 4}); }),
               ContainsSubstring(model + ": tensor \"wte\" has shape [4, 3], expected [3, 4]"));
    CHECK_THAT(input_error_of([&] { ck.tensor("model.safetensors", "wte", SafetensorsDtype::kBF16, {4, 3}); }),
               ContainsSubstring(model + ": tensor \"wte\" has dtype F32, expected BF16"));
    CHECK_THAT(input_error_of([&] { ck.tensor("optimizer.safetensors", "step", SafetensorsDtype::kI64, {1}); }),
               ContainsSubstring("tensor \"step\" has shape [], expected [1]"));
    CHECK_THAT(input_error_of([&] { ck.tensor("model.safetensors", "wpe", SafetensorsDtype::kF32, {4, 3}); }),
               ContainsSubstring(model + ": no tensor named \"wpe\""));
    CHECK_THAT(input_error_of([&] { ck.file("rng.safetensors"); }),
               ContainsSubstring(path + ": checkpoint has no file \"rng.safetensors\""));
  }
}

TEST_CASE("checkpoint attachments are kept, checked and shared by hard link", "[ckpt]") {
  TempDir tmp;
  const std::string dir = tmp.path("ckpt"), source = tmp.path("spm.model");
  write_file(source, "a tokenizer");
  const uint64_t sum = xxh64("a tokenizer", 11);
  const std::string first = save(dir, 1, {.attachments = {{"tokenizer.model", source, false, sum}}});
  // A copy, never a link to a file that may be edited in place.
  CHECK(fs::hard_link_count(first + "/tokenizer.model") == 1);
  const Checkpoint ck = load_checkpoint(dir);
  CHECK(ck.attachment_names() == std::vector<std::string>{"tokenizer.model"});
  CHECK(read_file(ck.attachment_path("tokenizer.model")) == "a tokenizer");
  CHECK(ck.file_names() == std::vector<std::string>{"model.safetensors", "optimizer.safetensors"});
  CHECK_THROWS_WITH(ck.attachment_path("vocab.json"), ContainsSubstring("no attached file \"vocab.json\""));

  // The next checkpoint links the first's copy.
  const std::string second = save(dir, 2, {.attachments = load_checkpoint(first).carried_attachments()});
  CHECK(fs::equivalent(first + "/tokenizer.model", second + "/tokenizer.model"));

  // A source that changed since its checksum was read is refused, with nothing saved.
  write_file(source, "another tokenizer");
  CHECK_THROWS_WITH(save(dir, 3, {.attachments = {{"tokenizer.model", source, false, sum}}}),
                    ContainsSubstring("spm.model: changed since it was read"));
  CHECK_FALSE(fs::exists(dir + "/iter_0000003"));

  // A damaged or missing attachment is refused on load.
  write_file(second + "/tokenizer.model", "a tokenizeR");
  CHECK_THAT(load_error(second), ContainsSubstring("tokenizer.model: checksum mismatch"));
  fs::remove(second + "/tokenizer.model");
  CHECK_THAT(load_error(second), ContainsSubstring("tokenizer.model: missing file"));
}
