// The registry of the CUDA layers (model/cuda_layers.hpp): one layer per entry of the layer
// sequence for the GPT kinds, in every activation type; a kind without a CUDA implementation (the
// test tree's toy kind, toy_layer.hpp) refused by name, by the registry and by both CUDA models.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "infer/cuda_transformer.hpp"
#include "model/config.hpp"
#include "model/cuda_layers.hpp"
#include "model/gpt_cuda.hpp"
#include "ops/cuda/device_memory.hpp"
#include "toy_model.hpp"

namespace {

using Catch::Matchers::ContainsSubstring;
using meg::ModelConfig;

template <typename X>
void check_gpt_layers(const ModelConfig& c) {
  const int64_t n = int64_t(c.layers().size());
  CHECK(meg::make_cuda_layers<X>(c, 1, 0, n).size() == size_t(n));
  CHECK(meg::make_cuda_layers<X>(c, 1, 2, n).size() == size_t(n - 2));
}

}  // namespace

TEST_CASE("CUDA layers: one per entry of the layer sequence, in every type", "[gpu][model]") {
  ModelConfig c = ModelConfig::preset("tiny");
  c.vocab_size = 1000;
  c.pad_vocab();
  c.validate();
  check_gpt_layers<float>(c);
  check_gpt_layers<__nv_bfloat16>(c);
  check_gpt_layers<__half>(c);
}

TEST_CASE("CUDA models refuse a layer kind without a CUDA implementation by name", "[gpu][model]") {
  const ModelConfig c = meg::toy::toy_config();
  const std::string want = "the toy layer 'T' has no CUDA implementation";
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const meg::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no InputError");
  };
  CHECK_THAT(message([&] { meg::make_cuda_layers<__nv_bfloat16>(c, 1, 0, 6); }), ContainsSubstring(want));
  meg::cuda::DeviceAllocator alloc;
  CHECK_THAT(message([&] { meg::GptCudaModel<float> model(c, alloc, nullptr); }), ContainsSubstring(want));
  const std::vector<float> params(size_t(c.num_parameters()), 0.0f);
  CHECK_THAT(message([&] { meg::CudaTransformer<float> net(c, params, 4, 8); }), ContainsSubstring(want));
}
