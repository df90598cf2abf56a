// The smallest useful model of either family, for unit tests that run it many times.
#pragma once

#include "model/config.hpp"

namespace meg {

// 2 layers, C 16, 4 heads (2 KV heads for Llama), vocab 50 padded to 64, 8 positions.
inline ModelConfig micro_config(ModelFamily family) {
  ModelConfig c = ModelConfig::defaults(family);
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = family == ModelFamily::llama ? 2 : 4;
  c.ffn_hidden_size = family == ModelFamily::llama ? 48 : 32;
  c.seq_length = 8;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 16;
  c.pad_vocab();
  if (family == ModelFamily::llama) c.rope_theta = 10000;
  c.validate();
  return c;
}

}  // namespace meg
