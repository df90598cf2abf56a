// Import of a Hugging Face checkpoint directory (GPT2LMHeadModel or LlamaForCausalLM) as meg
// tensors, one whole tensor at a time.
//
// DIR holds config.json (hf_config.hpp) and either model.safetensors or
// model.safetensors.index.json with the shards its weight_map names. Tensors may be F32, BF16 or
// F16 (widened to float exactly). GPT-2 names are accepted with or without the "transformer."
// prefix (save_pretrained writes it; OpenAI's original upload lacks it). Ignored: the attention
// mask buffers of old GPT-2 files (attn.bias, attn.masked_bias), rotary_emb.inv_freq of old Llama
// files, and a stored lm_head.weight of a tied model (transformers ties it to the embedding too).
//
// Everything is checked when the reader is constructed, before any tensor is read: every file is
// a valid safetensors file, the index names only files that exist and tensors they hold, every
// tensor the config calls for is present with its shape and a float dtype, and no other tensor is
// (a tensor meg's model would drop means the config and the weights disagree). Each refusal is a
// one-line InputError naming the file and the tensor or field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/safetensors.hpp"
#include "convert/hf_names.hpp"
#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

struct HfImportOptions {
  int64_t make_vocab_size_divisible_by = 128;  // meg's vocabulary padding (Megatron's rule) ...
  int64_t tp = 1;                              // ... for this tensor-parallel size
};

class HfReader {
 public:
  explicit HfReader(const std::string& dir, const HfImportOptions& options = {});
  ~HfReader();
  HfReader(const HfReader&) = delete;
  HfReader& operator=(const HfReader&) = delete;

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // meg's tensors for config(), in storage order (gpt_parameter_table).
  const std::vector<ParamTensor>& tensors() const { return table_; }
  // The dtype of the stored embedding (informative: files may mix dtypes).
  SafetensorsDtype stored_dtype() const { return stored_dtype_; }

  // The whole meg tensor NAME (row-major, config()'s shape; vocabulary rows past the real
  // vocabulary zero). std::invalid_argument for a name not in tensors().
  std::vector<float> tensor(const std::string& name) const;

 private:
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };

  void open_files();
  void locate_tensors();

  std::string dir_;
  ModelConfig config_;
  std::vector<ParamTensor> table_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::string> weight_map_;  // HF name -> file name (from the index, or the one file)
  std::string index_path_;                          // empty for a single file
  std::map<std::string, std::vector<HfTensorMap>> pieces_;  // meg name -> its Hugging Face tensors
  std::map<std::string, Located> located_;                  // HF name (as stored) -> where
  SafetensorsDtype stored_dtype_ = SafetensorsDtype::kF32;
};

}  // namespace meg
