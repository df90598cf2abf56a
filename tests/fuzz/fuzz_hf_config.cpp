// A Hugging Face config.json read as meg-ckpt-convert --from hf reads it: the model's settings, then
// the tensors they call for, located in the model.safetensors of tests/data/checkpoints/gpt-hf
// (the seeds are that model's config.json and variations of it).
#include "convert/hf_import.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  meg::fuzz::copy_fixture(MEG_TEST_DATA "/checkpoints/gpt-hf/model.safetensors", "model.safetensors");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meg::fuzz::write_file("config.json", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] { meg::HfReader reader(meg::fuzz::work_dir()); });
}
