// meg-generate's work (bin/meg-generate.cpp only parses the options): load a checkpoint, build the
// inference model, and answer the prompts of --prompt, --prompts or stdin (see man/meg-generate.1).
#pragma once

#include <optional>
#include <string>

#include "infer/prompts.hpp"

namespace meg {

struct GenerateOptions {
  std::string load;                   // checkpoint directory
  std::string tokenizer, merges;      // "" : the checkpoint's
  std::optional<std::string> prompt;  // --prompt TEXT
  std::string prompts;                // --prompts FILE.jsonl ("-": stdin)
  std::string output;                 // JSONL results file ("" or "-": stdout)
  PromptSettings settings;            // every prompt's, unless a JSONL line sets its own
  std::optional<int> batch;           // slots; default 1 on cpu, 32 on cuda
  int max_length = 0;                 // tokens a sequence holds; 0: the model's seq_length
  std::string device;                 // "" : cuda when a GPU is present, else cpu
  std::string precision;              // "" : bf16 on cuda, fp32 on cpu
  int tp = 1;                         // tensor-parallel ranks: the job's processes (mpirun -np TP)
  bool echo = false;                  // text output: each prompt before its completion
  bool json = false;                  // --prompt and stdin: JSON lines instead of text
};

// Runs meg-generate, on every process of the job (under mpirun, each a tensor-parallel rank;
// rank 0 reads the prompts and writes the results); InputError on bad options or input. Returns
// the exit status.
int run_generate(GenerateOptions options);

}  // namespace meg
