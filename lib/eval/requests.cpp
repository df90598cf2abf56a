#include "eval/requests.hpp"

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "eval/python_text.hpp"
#include "eval/rolling_windows.hpp"

namespace meg {
namespace {

std::vector<int32_t> encode(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids;
  tokenizer.encode(text, ids);
  return ids;
}

// The texts of DOC's requests (none for perplexity, whose windows come from its tokens).
std::vector<Request> text_requests(const Task& task, size_t d, const std::string& examples) {
  const EvalDoc& doc = task.docs[d];
  std::vector<Request> out;
  if (task.type == TaskType::lambada) out.push_back({d, 0, examples + doc.text, doc.target, {}, {}});
  if (task.type == TaskType::multiple_choice)
    for (size_t c = 0; c < doc.choices.size(); ++c)
      out.push_back({d, static_cast<int>(c), examples + doc.text, " " + doc.choices[c], {}, {}});
  return out;
}

std::vector<Request> window_requests(const Task& task, size_t d, const Tokenizer& tokenizer, int max_length,
                                     int64_t vocab_size) {
  const EvalDoc& doc = task.docs[d];
  const std::vector<int32_t> tokens = task.tokenized ? doc.tokens : encode(tokenizer, doc.target);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      input_error("{}: token {} at position {} is outside the model's vocabulary of {}", doc_where(task, doc),
                  tokens[i], i, vocab_size);
  std::vector<Request> out;
  for (TokenWindow& w : rolling_windows(tokens, tokenizer.eod_id(), max_length))
    out.push_back({d, static_cast<int>(out.size()), "", "", std::move(w.context), std::move(w.continuation)});
  return out;
}

void check_continuation(const Task& task, const Request& r, int max_length) {
  const std::string where = doc_where(task, task.docs[r.doc]);
  const std::string which = task.type == TaskType::multiple_choice ? fmt::format("choice {}", r.index) : "the target";
  if (r.continuation_tokens.empty())
    input_error("{}: {} (\"{}\") tokenizes to nothing after its context", where, which, r.continuation);
  if (r.continuation_tokens.size() > static_cast<size_t>(max_length))
    input_error("{}: {} is {} tokens, more than the model's context of {}", where, which, r.continuation_tokens.size(),
                max_length);
}

}  // namespace

void encode_request(const Tokenizer& tokenizer, Request& r) {
  const std::string_view context = py::rstrip(r.context);
  if (r.context.empty() || context.empty()) {
    // lm-eval's empty context; one of spaces only would fail its assertion, and gets the same here.
    r.context_tokens = {tokenizer.eod_id()};
    r.continuation_tokens = encode(tokenizer, r.context + r.continuation);
    return;
  }
  r.context_tokens = encode(tokenizer, context);
  const std::vector<int32_t> whole = encode(tokenizer, r.context + r.continuation);
  const size_t skip = std::min(whole.size(), r.context_tokens.size());
  r.continuation_tokens.assign(whole.begin() + skip, whole.end());
}

std::vector<Request> build_requests(const Task& task, const Tokenizer& tokenizer, FewshotSampler* fewshot,
                                    int max_length, int64_t vocab_size) {
  // The texts first, in document order: the few-shot generator advances document by document.
  std::vector<std::vector<Request>> per_doc(task.scored);
  for (size_t d = 0; d < task.scored; ++d)
    per_doc[d] = text_requests(task, d, fewshot ? fewshot->examples(task.docs[d]) : "");
  // Then the tokens, documents spread over the threads (the tokenizer is thread-safe).
  parallel_for(task.scored, 1, [&](size_t begin, size_t end) {
    for (size_t d = begin; d < end; ++d) {
      if (task.type == TaskType::perplexity) {
        per_doc[d] = window_requests(task, d, tokenizer, max_length, vocab_size);
        continue;
      }
      for (Request& r : per_doc[d]) {
        encode_request(tokenizer, r);
        check_continuation(task, r, max_length);
      }
    }
  });
  std::vector<Request> requests;
  for (auto& rs : per_doc)
    for (Request& r : rs) requests.push_back(std::move(r));
  return requests;
}

}  // namespace meg
