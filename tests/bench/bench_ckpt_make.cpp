// A one-process checkpoint of a model preset's shape, made without training, for timing
// meg-ckpt-convert (scripts/bench-ckpt-convert.sh): the parameters and both moments hold
// pseudo-random floats (no run of equal bytes a file system could shortcut), streamed to disk
// through the converter's own writer, so memory holds one tensor. The record is a checkpoint's
// (model config, iteration 1, the one-process layout) without data or options: enough to convert,
// not to resume training.
//   bench_ckpt_make PRESET OUT        e.g. bench_ckpt_make gpt2-1.5b /tmp/ck

#include <cstdint>
#include <cstdio>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "convert/native_writer.hpp"
#include "model/config.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bench_ckpt_make PRESET OUT\n");
    return 1;
  }
  const meg::ModelConfig config = meg::ModelConfig::preset(argv[1]);
  const meg::NativeLayout layout;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  meg::CheckpointWriter w(argv[2], 1);
  const uint64_t bytes = meg::write_native_state(
      w, config, layout, [&](const meg::ParamTensor& t, meg::StateKind, std::vector<float>& whole) {
        whole.resize(t.numel);
        for (float& x : whole) {  // xorshift64: fast, and every value differs from its neighbours
          state ^= state << 13;
          state ^= state >> 7;
          state ^= state << 17;
          x = float(int32_t(state >> 32)) * 1e-11f;
        }
      });
  nlohmann::ordered_json record;
  record["model"] = config.to_json();
  record["iteration"] = 1;
  record["optimizer_step"] = 1;
  meg::set_record_layout(record, layout);
  const std::string path = w.commit(record);
  std::printf("%s %llu\n", path.c_str(), static_cast<unsigned long long>(bytes));
  return 0;
}
