// An indexed dataset (.idx and .bin) read as meg-index --info, meg-blend and meg-pretrain read it.
//
// Input: u32 n (little-endian), then the .idx (its first n bytes of what follows, at most all of
// it), then the .bin (the rest).
#include <algorithm>
#include <cstring>

#include "data/dataset_tools.hpp"
#include "data/gpt_dataset.hpp"
#include "data/indexed_dataset.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n;
  std::memcpy(&n, data, 4);
  const size_t idx_size = std::min<size_t>(n, size - 4);
  const std::string prefix = meg::fuzz::work_dir() + "/d";
  meg::fuzz::write_file("d.idx", {data + 4, idx_size});
  meg::fuzz::write_file("d.bin", {data + 4 + idx_size, size - 4 - idx_size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::IndexedDataset dataset(prefix);
    meg::describe_dataset(dataset, /*entropy=*/true);
    dataset.verify();

    meg::BlendOptions options;
    options.seq_length = 8;
    options.split = "1,0,0";
    options.samples[0] = 16;
    const std::string blend = meg::fuzz::work_dir() + "/d.blend";
    meg::build_blend({{1.0, prefix}}, options, blend);
    const meg::GptDataset samples(blend);
    std::vector<int32_t> tokens(samples.seq_length() + 1);
    for (uint64_t i = 0; i < samples.num_samples(meg::Split::kTrain); ++i)
      samples.sample(meg::Split::kTrain, i, tokens.data());
  });
}
