// A checkpoint record (checkpoint.json) read as meg-generate and meg-eval read a checkpoint: the
// record, its files, the model's settings and parameters. The record's files are those of
// tests/data/checkpoints/gpt, which the seeds are the record of.
#include "fuzz_input.hpp"
#include "infer/checkpoint_model.hpp"

static const char* const kFixture = MEG_TEST_DATA "/checkpoints/gpt";

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  meg::fuzz::copy_fixture(std::string(kFixture) + "/model.safetensors", "model.safetensors");
  meg::fuzz::copy_fixture(std::string(kFixture) + "/optimizer.safetensors", "optimizer.safetensors");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meg::fuzz::write_file("checkpoint.json", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] { meg::load_checkpoint_model(meg::fuzz::work_dir()); });
}
