// The micro model of the layer-kind tests: a GPT-2 config (learned positions, LayerNorm, biases,
// tied embeddings) whose layer sequence mixes the test's toy kind (toy_layer.hpp) with GPT blocks.
#pragma once

#include "model/config.hpp"
#include "toy_layer.hpp"

namespace meg::toy {

// "T*-T*-": blocks 0 and 2 toy layers, 1 and 3 GPT blocks; C 16, 4 heads, vocab 50 padded to 64,
// 8 positions.
inline ModelConfig toy_config() {
  register_toy_layer();
  ModelConfig c = ModelConfig::defaults(ModelFamily::gpt2);
  c.hybrid_layer_pattern = "T*-T*-";
  c.num_layers = 4;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = 8;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 16;
  c.pad_vocab();
  c.validate();
  return c;
}

}  // namespace meg::toy
