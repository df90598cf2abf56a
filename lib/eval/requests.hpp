// lm-evaluation-harness's loglikelihood requests for a task's documents: the token sequences
// whose continuation's log-likelihood the model is asked for.
//
//   perplexity       the rolling windows of the document (rolling_windows.hpp), the end-of-document
//                    token as the prefix that predicts the first token
//   lambada          (few-shot examples + context, " lastword")
//   multiple choice  (few-shot examples + prompt, " " + choice) for each choice
//
// Text requests are tokenized as lm-eval's HFLM does (_encode_pair): whitespace that ends the
// context moves to the front of the continuation; the context and the whole are encoded, and the
// continuation is the whole's tokens after as many as the context's. An empty context is the
// end-of-document token alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "eval/fewshot.hpp"
#include "eval/task.hpp"

namespace meg {

struct Request {
  size_t doc = 0;                     // into Task::docs
  int index = 0;                      // the choice, or the window
  std::string context, continuation;  // the texts (empty for rolling windows)
  std::vector<int32_t> context_tokens, continuation_tokens;
};

// The (CONTEXT, CONTINUATION) tokens of a text request, as lm-eval's loglikelihood().
void encode_request(const Tokenizer& tokenizer, Request& request);

// Every request of TASK's scored documents, document by document (multiple choice: by choice;
// perplexity: by window), for a model of MAX_LENGTH tokens with vocabulary VOCAB_SIZE. FEWSHOT
// (null: none) gives the examples before each prompt. InputError naming the document when a
// continuation would not fit in MAX_LENGTH, or tokenizes to nothing, or a dataset's token is
// outside the vocabulary.
std::vector<Request> build_requests(const Task& task, const Tokenizer& tokenizer, FewshotSampler* fewshot,
                                    int max_length, int64_t vocab_size);

}  // namespace meg
