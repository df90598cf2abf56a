// Time to initialise a model's parameters on the CPU (model/init.hpp), float: the whole table on
// one thread and on every thread, and one rank's shard of a 4-way tensor-parallel split. The
// reference is the initialisation it replaced: one std::mt19937_64 stream through Box-Muller over
// the whole table in storage order, which is serial and which every rank had to run in full before
// slicing out its part. The ratio is the reference's time over the measured one.
//
// A table that does not fit in memory at once (Llama 3 8B is 32 GB of floats) is generated
// pipeline stage by stage into one reused buffer, each stage's values being exactly those of the
// whole table's; the buffer is touched before the clock starts, so page faults are not timed.
// One timed run per row: each is seconds long.
//   bench_init [PRESET]      (default llama-8b; any ModelConfig preset; tiny ones with vocab 50304)
//   MEG_NUM_THREADS=N        the "every thread" rows' thread count (default: the cores)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/init.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

namespace {

using namespace meg;

constexpr uint64_t kSeed = 1234;
// The most elements generated at once: 6 GB of floats.
constexpr size_t kBufferElements = size_t(1500) << 20;

size_t size_of(const std::vector<ParamTensor>& table) {
  return table.empty() ? 0 : table.back().offset + table.back().numel;
}

// TABLE cut into the fewest pipeline stages whose largest fits the buffer.
std::vector<std::vector<ParamTensor>> stages_of(const ModelConfig& c, const std::vector<ParamTensor>& table) {
  for (int stages = 1; stages <= c.num_layers; ++stages) {
    if (c.num_layers % stages != 0) continue;
    std::vector<std::vector<ParamTensor>> parts;
    for (int s = 0; s < stages; ++s) parts.push_back(stage_table(c, {s, stages}, table));
    if (std::all_of(parts.begin(), parts.end(), [](const auto& p) { return size_of(p) <= kBufferElements; }))
      return parts;
  }
  std::fprintf(stderr, "bench_init: a single block does not fit the buffer\n");
  std::exit(1);
}

// The replaced initialisation: mt19937_64, Box-Muller, both values of each pair used.
class StreamNormals {
 public:
  explicit StreamNormals(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(6.283185307179586 * u2);
    have_spare_ = true;
    return r * std::cos(6.283185307179586 * u2);
  }

 private:
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool have_spare_ = false;
};

void stream_init(const ModelConfig& c, const std::vector<ParamTensor>& stage, StreamNormals& normal, float* params) {
  const double scaled = c.init_std / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  for (const auto& t : stage) {
    float* w = params + t.offset;
    if (t.init == ParamInit::zeros || t.init == ParamInit::ones) {
      std::fill_n(w, t.numel, t.init == ParamInit::ones ? 1.0f : 0.0f);
      continue;
    }
    const double s = t.init == ParamInit::normal ? c.init_std : scaled;
    for (size_t i = 0; i < t.numel; ++i) w[i] = static_cast<float>(s * normal());
  }
}

// Seconds to run INIT on each stage of STAGES in turn, writing into BUFFER.
double seconds(const std::vector<std::vector<ParamTensor>>& stages, std::vector<float>& buffer,
               const std::function<void(const std::vector<ParamTensor>&, float*)>& init) {
  std::fill(buffer.begin(), buffer.end(), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& stage : stages) init(stage, buffer.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "llama-8b";
  ModelConfig c = ModelConfig::preset(preset);
  if (c.vocab_size == 0) c.set_vocab_from_tokenizer(50304);
  c.validate();
  const unsigned threads = num_threads();
  const int tp = 4;

  const auto full = stages_of(c, gpt_parameter_table(c));
  const auto shard = stages_of(c, gpt_parameter_table(c, tp));
  size_t largest = 0;
  for (const auto* parts : {&full, &shard})
    for (const auto& p : *parts) largest = std::max(largest, size_of(p));
  std::vector<float> buffer(largest);

  std::fprintf(stderr, "bench_init: %s, %.2fB parameters, generated in %zu part(s); the reference\n", preset.c_str(),
               static_cast<double>(c.num_parameters()) / 1e9, full.size());
  const double reference = seconds(full, buffer, [&, normal = StreamNormals(kSeed)](const auto& stage, float* p) mutable {
    stream_init(c, stage, normal, p);
  });
  struct Row {
    std::string name;
    double secs;
    size_t elements;
  };
  std::vector<Row> rows;
  const auto counter_based = [&](const std::string& name, unsigned n, int ways, const auto& parts) {
    std::fprintf(stderr, "bench_init: %s\n", name.c_str());
    set_num_threads(n);
    size_t elements = 0;
    for (const auto& p : parts) elements += size_of(p);
    rows.push_back({name, seconds(parts, buffer, [&](const auto& stage, float* p) {
                      gpt_init_local(c, stage, ways, 0, kSeed, p);
                    }), elements});
  };
  counter_based("whole model, 1 thread", 1, 1, full);
  counter_based("whole model, " + std::to_string(threads) + " threads", threads, 1, full);
  counter_based("tp " + std::to_string(tp) + " shard (rank 0), 1 thread", 1, tp, shard);
  counter_based("tp " + std::to_string(tp) + " shard (rank 0), " + std::to_string(threads) + " threads", threads, tp,
                shard);

  std::printf("Initialisation of %s (%.2fB parameters, float), counter-based (Philox4x32-10, Box-Muller).\n",
              preset.c_str(), static_cast<double>(c.num_parameters()) / 1e9);
  std::printf("Reference: the whole model from one mt19937_64 stream, 1 thread (what every rank ran before).\n\n");
  std::printf("| benchmark | measured | reference | ratio |\n|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.1f s (%.0f M values/s) | %.1f s | %.2fx |\n", r.name.c_str(), r.secs,
                static_cast<double>(r.elements) / r.secs / 1e6, reference, reference / r.secs);
  return 0;
}
