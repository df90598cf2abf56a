#include "model/tensor_parallel.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace meg {

void check_tensor_parallel(const ModelConfig& c, int tp) {
  if (tp < 1) input_error("--tp {} must be at least 1", tp);
  const auto need = [&](int64_t size, const char* what) {
    if (size % tp != 0) input_error("--tp {}: the model's {} ({}) do not divide over {} ranks", tp, what, size, tp);
  };
  need(c.num_heads, "attention heads");
  need(c.num_kv_heads, "key/value heads");
  need(c.ffn_hidden_size, "MLP width");
  need(c.padded_vocab_size, "padded vocabulary rows");
}

std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config, int tp) {
  check_tensor_parallel(config, tp);
  std::vector<ParamTensor> table = gpt_parameter_table(config);
  size_t offset = 0;
  for (auto& t : table) {
    if (t.tp.split == TpSplit::row_parallel) t.shape[1] /= tp;
    else if (t.tp.split != TpSplit::replicated) t.shape[0] /= tp;
    for (int64_t& part : t.tp.parts) part /= tp;
    t.numel = 1;
    for (const int64_t d : t.shape) t.numel *= static_cast<size_t>(d);
    t.offset = offset;
    offset += t.numel;
  }
  return table;
}

template <typename F>
void shard_parameters(const ModelConfig& config, int tp, int rank, const F* full, F* local) {
  const auto full_table = gpt_parameter_table(config);
  const auto local_table = gpt_parameter_table(config, tp);
  for (size_t i = 0; i < full_table.size(); ++i) {
    const F* f = full + full_table[i].offset;
    F* l = local + local_table[i].offset;
    for_each_shard_run(full_table[i], tp, rank,
                       [&](size_t fi, size_t li, size_t n) { std::copy(f + fi, f + fi + n, l + li); });
  }
}

template <typename F>
void unshard_parameters(const ModelConfig& config, int tp, const std::vector<const F*>& locals, F* full) {
  const auto full_table = gpt_parameter_table(config);
  const auto local_table = gpt_parameter_table(config, tp);
  for (int rank = 0; rank < tp; ++rank)
    for (size_t i = 0; i < full_table.size(); ++i) {
      const F* l = locals[static_cast<size_t>(rank)] + local_table[i].offset;
      F* f = full + full_table[i].offset;
      for_each_shard_run(full_table[i], tp, rank,
                         [&](size_t fi, size_t li, size_t n) { std::copy(l + li, l + li + n, f + fi); });
    }
}

template void shard_parameters<float>(const ModelConfig&, int, int, const float*, float*);
template void shard_parameters<double>(const ModelConfig&, int, int, const double*, double*);
template void unshard_parameters<float>(const ModelConfig&, int, const std::vector<const float*>&, float*);
template void unshard_parameters<double>(const ModelConfig&, int, const std::vector<const double*>&, double*);

}  // namespace meg
