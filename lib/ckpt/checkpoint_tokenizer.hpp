// The tokenizer a checkpoint keeps. meg-pretrain attaches the files of its tokenizer to every
// checkpoint it saves (ckpt/checkpoint.hpp, attachments), under the names Hugging Face gives them,
// and names them in the record:
//
//   "tokenizer": {"tokenizer": "tokenizer.model", "merges": ""}         a SentencePiece model
//   "tokenizer": {"tokenizer": "vocab.json", "merges": "merges.txt"}   GPT-2 byte-level BPE
//   "tokenizer": {"tokenizer": "tokenizer.json", "merges": ""}          Hugging Face tokenizer.json
//                (with the tokenizer_config.json beside it, when there is one: its eos_token)
//
// so that a run directory keeps its tokenizer wherever it is moved, and a resumed or fine-tuned
// run, meg-generate, meg-eval and meg-ckpt-convert find it there. The checkpoints of one run share
// one copy: each save hard-links the files of the checkpoint saved before it. Older checkpoints
// name the tokenizer only by the paths of the record's options ("tokenizer", "merges").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"

namespace meg {

struct TokenizerFiles {
  std::string tokenizer;  // a SentencePiece .model, a GPT-2 vocab.json, or a tokenizer.json
  std::string merges;     // the GPT-2 tokenizer's merges.txt; "" for SentencePiece
  bool in_checkpoint = false;  // the files are a checkpoint's attachments (checkpoint_tokenizer)
  bool empty() const { return tokenizer.empty(); }
};

// What a writer of checkpoints keeps of its tokenizer from save to save.
class KeptTokenizer {
 public:
  KeptTokenizer() = default;  // no tokenizer: nothing attached, nothing recorded
  // FILES, whose checksums are read now: one that changes before a save is refused there.
  // FROM_CHECKPOINT: they are another checkpoint's attachments (linked rather than copied).
  KeptTokenizer(const TokenizerFiles& files, bool from_checkpoint);

  const std::vector<CheckpointAttachment>& attachments() const { return attachments_; }
  // The record's "tokenizer" entry (null without a tokenizer).
  nlohmann::ordered_json record() const;
  // After a save that wrote checkpoint directory DIR: the next saves link its copies.
  void saved_in(const std::string& dir);
  // Whether the checkpoint whose checkpoint.json is J keeps a tokenizer of other files.
  bool differs_from(const nlohmann::json& j) const;

 private:
  std::vector<CheckpointAttachment> attachments_;
  bool merges_ = false;
};

// The tokenizer of the checkpoint in directory DIR whose checkpoint.json is J: its attached files,
// else the files its options name, else none (empty). InputError naming checkpoint.json when its
// record names a file that is not attached.
TokenizerFiles checkpoint_tokenizer(const std::string& dir, const nlohmann::json& j);
TokenizerFiles checkpoint_tokenizer(const Checkpoint& ck);

// InputError naming the checkpoint CHECKPOINT when a file of FILES, the tokenizer it records by
// path (older checkpoints), is not there.
void require_recorded_tokenizer(const TokenizerFiles& files, const std::string& checkpoint);

}  // namespace meg
