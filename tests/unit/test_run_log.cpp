// Seeing a run: CRC-32C, the TensorBoard event file read back record by record, the run log's
// metrics and events, durations, the start-up block and the loss plot.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "core/crc32c.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "test_util.hpp"
#include "train/loss_plot.hpp"
#include "train/run_log.hpp"
#include "train/run_summary.hpp"
#include "train/tensorboard_writer.hpp"

using namespace meg;

namespace {

// An Event as the test decodes it (event.proto's fields).
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, writer;
  int64_t session_status = -1;
  bool has_summary = false;
  std::map<std::string, float> scalars;
};

uint64_t varint(const std::string& b, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    REQUIRE(pos < b.size());
    const auto byte = static_cast<uint8_t>(b[pos++]);
    v |= uint64_t(byte & 0x7F) << shift;
    if (byte < 0x80) return v;
  }
}

// Calls F(field, wire type, bytes or varint) for each field of a message.
template <typename F>
void for_each_field(const std::string& b, F&& f) {
  size_t pos = 0;
  while (pos < b.size()) {
    const uint64_t key = varint(b, pos);
    const auto field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    uint64_t number = 0;
    std::string bytes;
    if (wire == 0) number = varint(b, pos);
    else if (wire == 1 || wire == 5) bytes = b.substr(pos, wire == 1 ? 8 : 4), pos += bytes.size();
    else if (wire == 2) {
      const uint64_t n = varint(b, pos);
      bytes = b.substr(pos, n);
      pos += n;
    } else FAIL("wire type " << wire);
    f(field, wire, number, bytes);
  }
}

template <typename T>
T load(const std::string& bytes) {
  T v;
  REQUIRE(bytes.size() == sizeof(T));
  std::memcpy(&v, bytes.data(), sizeof(T));
  return v;
}

// Every record of an event file, both of its CRCs checked, decoded.
std::vector<DecodedEvent> read_events(const std::string& path) {
  const std::string file = read_file(path);
  std::vector<DecodedEvent> events;
  for (size_t pos = 0; pos < file.size();) {
    REQUIRE(pos + 12 <= file.size());
    const auto length = load<uint64_t>(file.substr(pos, 8));
    CHECK(load<uint32_t>(file.substr(pos + 8, 4)) == masked_crc32c(file.substr(pos, 8)));
    REQUIRE(pos + 16 + length <= file.size());
    const std::string data = file.substr(pos + 12, length);
    CHECK(load<uint32_t>(file.substr(pos + 12 + length, 4)) == masked_crc32c(data));
    pos += 16 + length;
    DecodedEvent e;
    for_each_field(data, [&](int field, int wire, uint64_t number, const std::string& bytes) {
      if (field == 1 && wire == 1) e.wall_time = load<double>(bytes);
      else if (field == 2 && wire == 0) e.step = static_cast<int64_t>(number);
      else if (field == 3 && wire == 2) e.file_version = bytes;
      else if (field == 7 && wire == 2) {
        for_each_field(bytes, [&](int f, int, uint64_t n, const std::string&) {
          if (f == 1) e.session_status = static_cast<int64_t>(n);
        });
      } else if (field == 10 && wire == 2) {
        for_each_field(bytes, [&](int f, int, uint64_t, const std::string& s) {
          if (f == 1) e.writer = s;
        });
      } else if (field == 5 && wire == 2) {
        e.has_summary = true;
        for_each_field(bytes, [&](int f, int w, uint64_t, const std::string& value) {
          REQUIRE((f == 1 && w == 2));
          std::string tag;
          std::optional<float> simple;
          for_each_field(value, [&](int vf, int vw, uint64_t, const std::string& x) {
            if (vf == 1 && vw == 2) tag = x;
            else if (vf == 2 && vw == 5) simple = load<float>(x);
          });
          REQUIRE(simple);
          e.scalars[tag] = *simple;
        });
      } else FAIL("unexpected field " << field << " of wire type " << wire);
    });
    events.push_back(e);
  }
  return events;
}

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().string());
  REQUIRE(files.size() == 1);
  CHECK(std::filesystem::path(files[0]).filename().string().rfind("events.out.tfevents.", 0) == 0);
  return files[0];
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("CRC-32C and its TFRecord mask", "[train]") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the standard check value
  CHECK(crc32c("") == 0u);
  CHECK(masked_crc32c("") == 0xA282EAD8u);  // mask(0): a rotation of 0, plus the constant
  CHECK(mask_crc32c(0xE3069283u) == (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u));
  const std::string zeros(32, '\0');
  CHECK(crc32c(zeros) == 0x8A9136AAu);  // RFC 3720, B.4: 32 bytes of zeros
}

TEST_CASE("TensorBoard event files hold whole TFRecords of Event protos", "[train]") {
  TempDir tmp;
  const std::string dir = tmp.path("tb/nested");
  {
    TensorBoardWriter w(dir, 11);
    const TensorBoardScalar first[] = {{"lm loss", 6.5f}, {"learning-rate", 0.0f}};
    w.add_scalars(11, first);
    const TensorBoardScalar second[] = {{"lm loss validation", 2.25f}};
    w.add_scalars(5'000'000'000LL, second);  // a step past 32 bits
  }
  const auto events = read_events(only_event_file(dir));
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].writer == "meg-pretrain");
  CHECK(events[0].wall_time > 1.6e9);
  CHECK(events[1].session_status == 1);  // SessionLog START at the run's first step
  CHECK(events[1].step == 11);
  CHECK(events[2].step == 11);
  CHECK(events[2].scalars == std::map<std::string, float>{{"lm loss", 6.5f}, {"learning-rate", 0.0f}});
  CHECK(events[3].step == 5'000'000'000LL);
  CHECK(events[3].scalars == std::map<std::string, float>{{"lm loss validation", 2.25f}});
}

TEST_CASE("the run log writes train and valid records and the same scalars as events", "[train]") {
  TempDir tmp;
  RunLogOptions o;
  o.start_iteration = 0;
  o.iters = 5;
  o.log_interval = 2;
  o.tokens_per_iter = 64;
  o.flops_per_token = 1e6;
  o.metrics = tmp.path("metrics.jsonl");
  o.tensorboard_dir = tmp.path("tb");
  o.device_numbers = [] { return DeviceNumbers{1 << 20, 0}; };
  {
    struct Quiet {  // the log lines are not what this test reads
      Quiet() { log::set_quiet(true); }
      ~Quiet() { log::set_quiet(false); }
    } quiet;
    RunLog run_log(o);
    run_log.start({{"options", {}}}, {"model: a test"});
    const double losses[] = {4.0, 3.0, 2.5, 2.0, 1.5};
    for (int i = 1; i <= 5; ++i) {
      run_log.train_step(i, losses[i - 1], 0.001 * i, 0.5);
      if (i == 4) run_log.evaluation(4, 2.2);
    }
  }
  const auto m = read_jsonl(o.metrics);
  REQUIRE(m.size() == 4);  // iterations 2 and 4, the evaluation at 4, the last iteration 5
  CHECK(m[0]["iteration"] == 2);
  CHECK(m[0]["split"] == "train");
  CHECK(m[0]["loss"].get<double>() == 3.5);  // the mean over the interval
  CHECK(m[0]["lr"].get<double>() == 0.002);   // the last iteration's
  CHECK(m[0]["consumed_tokens"] == 128);
  CHECK(m[0]["peak_memory_bytes"] == 1 << 20);
  CHECK(m[2]["split"] == "valid");
  CHECK(m[2]["valid_loss"].get<double>() == 2.2);
  CHECK(m[2]["valid_ppl"].get<double>() == std::exp(2.2));
  CHECK(!m[2].contains("loss"));
  CHECK(m[3]["iteration"] == 5);
  CHECK(m[3]["loss"].get<double>() == 1.5);

  const auto events = read_events(only_event_file(o.tensorboard_dir));
  REQUIRE(events.size() == 2 + m.size());
  CHECK(events[1].step == 1);
  for (size_t i = 0; i < m.size(); ++i) {
    const auto& e = events[2 + i];
    CHECK(e.step == m[i]["iteration"].get<int64_t>());
    if (m[i]["split"] == "train") {
      CHECK(e.scalars.at("lm loss") == float(m[i]["loss"].get<double>()));
      CHECK(e.scalars.at("learning-rate") == float(m[i]["lr"].get<double>()));
      CHECK(e.scalars.at("grad-norm") == float(m[i]["grad_norm"].get<double>()));
      CHECK(e.scalars.at("tokens-per-second") == float(m[i]["tokens_per_s"].get<double>()));
      CHECK(e.scalars.at("throughput") == float(m[i]["model_tflops_per_gpu"].get<double>()));
      CHECK(e.scalars.at("mem-max-allocated-bytes") == float(1 << 20));
      const double seconds = m[i]["ms_per_iter"].get<double>() / 1000;
      CHECK(std::abs(e.scalars.at("iteration-time") - seconds) <= 1e-6 * seconds);
    } else {
      CHECK(e.scalars.at("lm loss validation") == float(m[i]["valid_loss"].get<double>()));
      CHECK(e.scalars.at("lm loss validation ppl") == float(m[i]["valid_ppl"].get<double>()));
    }
  }
}

TEST_CASE("durations read as the log lines show them", "[train]") {
  CHECK(human_duration(0) == "0s");
  CHECK(human_duration(59.4) == "59s");
  CHECK(human_duration(59.6) == "1m00s");
  CHECK(human_duration(72) == "1m12s");
  CHECK(human_duration(3599.6) == "1h00m");
  CHECK(human_duration(3 * 3600 + 5 * 60 + 30) == "3h05m");
  CHECK(human_duration(2 * 86400 + 3 * 3600) == "2d03h");
  CHECK(human_duration(-5) == "0s");
  CHECK(human_duration(INFINITY) == "?");
}

TEST_CASE("the start-up block spells out the batch arithmetic", "[train]") {
  RunFacts f;
  f.model_source = "tiny";
  f.model = ModelConfig::preset("tiny");
  f.model.vocab_size = 2000;
  f.model.pad_vocab();
  f.layout.dp = 2;
  f.backend = "cpu fp32";
  f.micro_batch = 4;
  f.global_batch = 32;
  f.seq_length = 64;
  f.iters = 100;
  f.start_iteration = 40;
  f.blend = "run.blend";
  f.blend_train_samples = 6400;
  f.train_tokens_per_epoch = 102400;
  f.lr = {.lr = 1e-3, .min_lr = 1e-4, .warmup_iters = 10, .decay_iters = 100, .train_iters = 100,
          .style = LrDecayStyle::kCosine};
  f.save = "ckpt";
  f.save_interval = 50;
  f.metrics = "ckpt/metrics.jsonl";
  const auto lines = run_summary(f);
  REQUIRE(lines.size() == 6);
  CHECK(lines[0].rfind("model: tiny, gpt2 family: 2 layers, hidden 64, 4 heads", 0) == 0);
  CHECK(lines[0].find("vocab 2000 (padded 2048)") != std::string::npos);
  CHECK(lines[0].find(parameter_count(f.model.num_parameters()) + " parameters") != std::string::npos);
  CHECK(lines[1] == "parallel: 2 ranks: tp 1 x pp 1 x dp 2 (cp 1, ep 1); cpu fp32");
  CHECK(lines[2] == "batch: micro-batch 4 x 2 data-parallel ranks x 4 accumulation steps = global batch 32; 2048 "
                    "tokens per iteration");
  CHECK(lines[3] == "data: 100 iterations: 3200 samples, 204.80k tokens (from iteration 40: 60 to go); the run "
                    "takes 50.0% of run.blend's 6400 train samples, 2.00 epochs of its inputs' train documents");
  CHECK(lines[4] == "learning rate: linear warmup from 0 to 0.001 over 10 iterations, then cosine decay from 0.001 "
                    "to 0.0001 at iteration 100");
  CHECK(lines[5] == "output: checkpoints in ckpt every 50 iterations and at the end; metrics in ckpt/metrics.jsonl; "
                    "TensorBoard events not written");
  CHECK(parameter_count(124'439'808) == "124.44M");
  CHECK(parameter_count(1'235'814'400) == "1.24B");
}

TEST_CASE("loss curves: the last record of an iteration counts, older files read too", "[train]") {
  TempDir tmp;
  const std::string run = tmp.path("run");
  std::filesystem::create_directory(run);
  write_file(run + "/metrics.jsonl",
             "{\"iteration\":1,\"split\":\"train\",\"loss\":5.0}\n"
             "{\"iteration\":2,\"split\":\"train\",\"loss\":4.0}\n"
             "{\"iteration\":2,\"split\":\"valid\",\"valid_loss\":4.5,\"valid_ppl\":90}\n"
             "\n"
             "{\"iteration\":2,\"split\":\"train\",\"loss\":3.9}\n"  // resumed after iteration 1
             "{\"iteration\":3,\"loss\":3.0}\n"                      // no split: a file of an older meg
             "{\"iteration\":3,\"valid_loss\":3.5}\n"
             "{\"iteration\":3,\"split\":\"test\",\"test_loss\":1}\n");
  const LossCurve c = read_loss_curve(run + "/");  // a --save directory
  CHECK(c.name == run);
  REQUIRE(c.train.size() == 3);
  CHECK(c.train[1].iteration == 2);
  CHECK(c.train[1].loss == 3.9);
  CHECK(c.train[2].loss == 3.0);
  REQUIRE(c.valid.size() == 2);
  CHECK(c.valid[1].loss == 3.5);
  CHECK(read_loss_curve(run + "/metrics.jsonl").name == run);

  const std::string svg = loss_plot_svg({c, LossCurve{"a & <b>", {{1, 0.0}, {5, 2.0}}, {}}});
  CHECK(svg.find("<polyline class=\"train\"") != std::string::npos);
  CHECK(svg.find("data-name=\"a &amp; &lt;b&gt;\"") != std::string::npos);
  CHECK(svg.find("loss (log scale)") == std::string::npos);  // a loss of 0: a linear axis

  write_file(tmp.path("bad.jsonl"), "{\"iteration\":1,\"split\":\"train\",\"loss\":5.0}\n[1]\n");
  CHECK(input_error_of([&] { read_loss_curve(tmp.path("bad.jsonl")); }) ==
        tmp.path("bad.jsonl") + ":2: expected a JSON object, found array");
  write_file(tmp.path("nothing.jsonl"), "{\"iteration\":1,\"split\":\"train\",\"lr\":5.0}\n");
  CHECK(input_error_of([&] { read_loss_curve(tmp.path("nothing.jsonl")); }) ==
        tmp.path("nothing.jsonl") + ":1: key 'loss' is missing");
}
