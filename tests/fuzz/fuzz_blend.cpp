// A blend file (meg-blend's output) read as meg-pretrain reads it: every sample of every split.
// The blend names the dataset "d" beside it: tests/fuzz/fixtures/d.{idx,bin}, which the seeds
// were built from (so that a blend whose bytes are intact passes the inputs' fingerprint check).
#include <vector>

#include "data/gpt_dataset.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  meg::fuzz::copy_fixture(MEG_FUZZ_FIXTURES "/d.idx", "d.idx");
  meg::fuzz::copy_fixture(MEG_FUZZ_FIXTURES "/d.bin", "d.bin");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("input.blend", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::GptDataset dataset(path);
    std::vector<int32_t> tokens(dataset.seq_length() + 1);
    for (int s = 0; s < meg::kNumSplits; ++s)
      for (uint64_t i = 0; i < dataset.num_samples(meg::Split(s)); ++i) dataset.sample(meg::Split(s), i, tokens.data());
  });
}
