// Generation with continuous batching over an InferenceModel (infer/inference_model.hpp).
//
// Requests come from a source, one at a time, and take the model's slots as they free up: each
// model call runs the prompts of the newly placed requests together with one decode token of
// every other running sequence, and a sequence that finishes gives its slot to the next request
// at the following call, while the others keep decoding. A sequence ends at the tokenizer's
// end-of-document token (finish "eod"; the token is not part of the completion), when its
// completion contains one of its stop strings (finish "stop"; the completion is cut where the stop
// string begins), or after max_tokens tokens or when its slot is full (finish "length").
//
// Tokens are chosen by the sampler (infer/sampler.hpp) with the draws of (the request's seed, its
// number, the step): the completions do not depend on the number of slots, on which requests
// share a batch, or on the order requests finish in. Only tokens the tokenizer knows are chosen
// (a model's vocabulary may be larger than its tokenizer's).
//
// Where the model chooses every token (greedy, or draws from the softmax of the logits) and
// overlaps the host (InferenceModel::overlaps), the step after a step is queued before the host
// takes that step's tokens in, whenever it is sure to follow (no row can reach its max_tokens or
// its slot's end, no request waits for a free slot): the device goes from step to step while the
// host streams the text. A sequence that then ends at the end-of-document token or a stop string
// has had one step more computed for it, unused.
//
// Text goes to the sink as it is produced, in whole characters (infer/text_stream.hpp), never a
// part of a stop string: text that could be the start of one is held back until the next tokens
// show that it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "infer/inference_model.hpp"
#include "infer/sampler.hpp"

namespace meg {

enum class FinishReason { stop, length, eod };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "eod"

struct GenerationRequest {
  std::vector<int32_t> prompt;    // at least one token, at most the model's max_length()
  int max_tokens = 64;            // at least 1
  SamplingParams sampling;        // valid (SamplingParams::validate)
  std::vector<std::string> stop;  // stop strings, none empty
};

struct Completion {
  std::string text;              // valid UTF-8, cut before a stop string
  std::vector<int32_t> ids;      // every token generated (those spelling a stop string too), not the eod token
  FinishReason finish = FinishReason::length;
};

class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // The next request. WAIT true: block until there is one; nothing means there are no more.
  // WAIT false (other sequences are running): nothing may also mean none is ready yet.
  virtual std::optional<GenerationRequest> next(bool wait) = 0;
};

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  // More text of request ID (numbered from 0 in the order the source gave them).
  virtual void text(size_t id, std::string_view text) = 0;
  // Request ID is finished; its text() calls spelled COMPLETION.text.
  virtual void done(size_t id, Completion completion) = 0;
};

struct GenerationStats {
  size_t requests = 0, prompt_tokens = 0;
  size_t generated_tokens = 0;  // tokens chosen, the end-of-document ones included
};

class Generator {
 public:
  // MODEL (whose slots are all reset by run()) and TOKENIZER must outlive the generator.
  Generator(InferenceModel& model, const Tokenizer& tokenizer);

  // Answers every request of SOURCE, reporting to SINK. InputError on a request that breaks the
  // rules of GenerationRequest (the source should have refused it with its own message).
  GenerationStats run(RequestSource& source, CompletionSink& sink);

 private:
  struct Sequence;
  void check(const GenerationRequest& request) const;
  // Takes the token chosen for S; true when S is finished (then reported).
  bool advance(Sequence& s, int32_t token, int slot, CompletionSink& sink);
  void release(Sequence& s, size_t end, CompletionSink& sink);

  InferenceModel& model_;
  const Tokenizer& tokenizer_;
  std::vector<Sampler> samplers_;  // one a slot: a call's rows are sampled in parallel
};

// Requests from a list, in order.
class ListSource final : public RequestSource {
 public:
  explicit ListSource(std::vector<GenerationRequest> requests) : requests_(std::move(requests)) {}
  std::optional<GenerationRequest> next(bool) override;

 private:
  std::vector<GenerationRequest> requests_;
  size_t next_ = 0;
};

// The completions of REQUESTS, in their order.
std::vector<Completion> generate(InferenceModel& model, const Tokenizer& tokenizer,
                                 std::vector<GenerationRequest> requests);

}  // namespace meg
