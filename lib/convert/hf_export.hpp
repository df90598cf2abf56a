// Export of a meg model as a Hugging Face checkpoint directory, one tensor at a time.
//
// OUT_DIR receives (written into a hidden temporary folder beside it, each file synced, the
// folder renamed into place at the end; a failure leaves nothing under OUT_DIR):
//   config.json                    hf_config.hpp: GPT2LMHeadModel or LlamaForCausalLM
//   generation_config.json
//   model.safetensors              when the tensors fit in one shard, else
//   model-00001-of-0000N.safetensors ... and model.safetensors.index.json
//                                  {"metadata": {"total_size": BYTES}, "weight_map": {NAME: FILE}}
//   the tokenizer's files          tokenizer.json, tokenizer.model, or vocab.json and merges.txt,
//                                  with tokenizer_config.json and special_tokens_map.json
//                                  (hf_tokenizer_export.hpp)
//
// The safetensors files are byte for byte what transformers' save_pretrained writes from the same
// values: the names, shapes and transposes of hf_names.hpp, metadata {"format": "pt"}, tensors laid
// out in the reference writer's order, and shards filled as huggingface_hub's
// split_torch_state_dict_into_shards fills them (state_dict order; a shard is closed when the next
// tensor would take it past max_shard_bytes; a tensor larger than that gets a shard of its own).
//
// Streaming: SOURCE returns one whole meg tensor (meg's layout and name, padded vocabulary) per
// call. Export holds one such tensor and the converted form of one Hugging Face tensor at a
// time; a tensor split into several Hugging Face tensors (linear_qkv into q/k/v_proj) may be asked
// for more than once, because the files are written in the reference writer's order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/safetensors.hpp"
#include "model/config.hpp"

namespace meg {

// Fills VALUES with the whole meg tensor named NAME (row-major, as gpt_parameter_table(config)
// shapes it). The caller reuses VALUES from tensor to tensor: a source should assign into it (resize,
// then fill) rather than hand back fresh memory, whose first touch costs more than the copy.
using MegTensorSource = std::function<void(const std::string& name, std::vector<float>& values)>;

struct HfExportOptions {
  SafetensorsDtype dtype = SafetensorsDtype::kF32;  // F32, BF16 or F16
  uint64_t max_shard_bytes = 5'000'000'000;         // save_pretrained's default max_shard_size "5GB"
  std::string tokenizer;  // optional: a tokenizer.json, a SentencePiece .model, or a GPT-2 vocab.json (with merges)
  std::string merges;     // the GPT-2 tokenizer's merges.txt
  // Called with the complete directory, under its temporary name, before it is renamed into
  // place: a check there that throws (meg-ckpt-convert --verify) leaves nothing.
  std::function<void(const std::string& dir)> before_commit;
};

struct HfExportSummary {
  std::vector<std::string> files;  // names written into the directory
  uint64_t tensor_bytes = 0;       // bytes of tensor data (the index's total_size)
};

// Writes CONFIG's model, its tensors from SOURCE, to the new directory OUT_DIR (which must not
// exist, or be empty). InputError for a config transformers cannot hold (check_hf_exportable), a
// tokenizer that does not load or has more tokens than CONFIG's vocabulary, or an OUT_DIR in use;
// std::logic_error when SOURCE returns a tensor of the wrong size.
HfExportSummary export_hf(const ModelConfig& config, const MegTensorSource& source, const std::string& out_dir,
                          const HfExportOptions& options = {});

}  // namespace meg
