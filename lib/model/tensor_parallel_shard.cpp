#include "model/tensor_parallel_shard.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/tensor_parallel.hpp"

namespace meg {

ModelConfig tensor_parallel_config(const ModelConfig& config, size_t parameters, int tp) {
  ModelConfig c = config;
  c.validate();
  const size_t whole = size_t(c.num_parameters());
  if (tp > 1) c.pad_vocab(tp);
  check_tensor_parallel(c, tp);
  if (parameters == whole) return c;
  if (tp == 1) input_error("model: {} parameters given, the model has {}", parameters, whole);
  const size_t shard = table_size(gpt_parameter_table(c, tp));
  if (parameters != shard)
    input_error("model: {} parameters given, the model has {} ({} on each of {} ranks)", parameters, whole, shard, tp);
  return c;
}

bool holds_whole_model(const ModelConfig& config, size_t parameters) {
  return parameters == size_t(config.num_parameters());
}

std::vector<float> tensor_parallel_shard(const ModelConfig& config, const ModelConfig& sharded, int tp, int rank,
                                         const std::function<void(const ParamTensor&, float*)>& read) {
  const std::vector<ParamTensor> from = gpt_parameter_table(config), to = gpt_parameter_table(sharded);
  const std::vector<ParamTensor> local = gpt_parameter_table(sharded, tp);
  std::vector<float> shard(table_size(local)), whole;
  // The tables differ only in the vocabulary's rows, which are contiguous: a tensor's elements past
  // the source's are the zero rows of a larger padding.
  for (size_t i = 0; i < to.size(); ++i) {
    const size_t have = from[i].numel;
    whole.resize(have);
    read(from[i], whole.data());
    float* dst = shard.data() + local[i].offset;
    for_each_shard_run(to[i], tp, rank, [&](size_t fi, size_t li, size_t n) {
      const size_t k = fi < have ? std::min(n, have - fi) : 0;
      std::copy_n(whole.data() + fi, k, dst + li);
      std::fill_n(dst + li + k, n - k, 0.0f);
    });
  }
  return shard;
}

std::vector<float> tensor_parallel_shard(const ModelConfig& config, std::span<const float> params,
                                         const ModelConfig& sharded, int tp, int rank) {
  return tensor_parallel_shard(config, sharded, tp, rank, [&](const ParamTensor& t, float* out) {
    std::copy_n(params.data() + t.offset, t.numel, out);
  });
}

}  // namespace meg
