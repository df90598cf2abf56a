// An evaluation task: its documents read from a JSONL file (or, for perplexity, from a Megatron
// indexed dataset), each already turned into the strings lm-evaluation-harness's task config
// would make of it (doc_format.hpp says which fields make which strings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meg {

enum class TaskType { perplexity, lambada, multiple_choice };
TaskType parse_task_type(const std::string& name);  // InputError listing the names
const char* task_type_name(TaskType type);          // "perplexity", "lambada", "multiple-choice"

struct EvalDoc {
  uint64_t line = 0;      // where it is: the JSONL line (from 1), or the dataset's document number
  nlohmann::json source;  // the JSONL object; few-shot sampling skips examples equal to the scored doc
  // lm-eval's doc_to_text and doc_to_target: lambada's context and " lastword"; multiple choice's
  // prompt and gold answer (the few-shot examples show it); perplexity's target is the text scored.
  std::string text, target;
  std::vector<std::string> choices;  // multiple choice
  int gold = -1;
  uint64_t words = 0, bytes = 0;  // perplexity over text: counted on the text as given
  std::vector<int32_t> tokens;    // perplexity over an indexed dataset: the document itself
};

struct Task {
  std::string path;
  TaskType type = TaskType::perplexity;
  bool tokenized = false;     // documents from an indexed dataset (tokens, no text)
  std::vector<EvalDoc> docs;  // every document read: the few-shot examples come from all of them
  size_t scored = 0;          // the first SCORED documents are evaluated
};

// Reads PATH: a JSONL file ("-": stdin; zstd-compressed or plain), or with TYPE perplexity the
// prefix of PATH.bin and PATH.idx when PATH itself is not a file. LIMIT > 0 scores only the first
// LIMIT documents (an indexed dataset then reads no more). InputError naming the file and line on
// bad input, or when there is no document to score.
Task read_task(const std::string& path, TaskType type, size_t limit);

// "FILE:LINE", or "PREFIX: document N" for an indexed dataset: the prefix of messages about DOC.
std::string doc_where(const Task& task, const EvalDoc& doc);

}  // namespace meg
