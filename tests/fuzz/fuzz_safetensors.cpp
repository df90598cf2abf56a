// A safetensors file (checkpoint shards, Hugging Face models): its header, then every float
// tensor's values as the converters decode them.
#include "ckpt/safetensors.hpp"
#include "ckpt/safetensors_floats.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("input.safetensors", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::SafetensorsFile file(path);
    file.checksum();
    for (const auto& tensor : file.tensors()) {
      file.tensor(tensor.name, tensor.dtype, tensor.shape);
      if (meg::is_float_dtype(tensor.dtype)) meg::decode_floats(tensor, path);
    }
  });
}
