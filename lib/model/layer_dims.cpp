// One rank's sizes of a layer (see layer_dims.hpp).
#include "model/layer_dims.hpp"

namespace meg {

LayerDims layer_dims(const ModelConfig& config, int tp_size, int N) {
  LayerDims d;
  d.N = N;
  d.C = static_cast<int>(config.hidden_size);
  d.NH = static_cast<int>(config.num_heads) / tp_size;
  d.NKV = static_cast<int>(config.num_kv_heads) / tp_size;
  d.HS = static_cast<int>(config.head_size());
  d.KV = d.NKV * d.HS;
  d.CQ = d.NH * d.HS;
  d.QKV = d.CQ + 2 * d.KV;
  d.Fh = static_cast<int>(config.ffn_hidden_size) / tp_size;
  d.FC = (config.activation == Activation::swiglu ? 2 : 1) * d.Fh;
  d.activation = config.activation;
  return d;
}

}  // namespace meg
