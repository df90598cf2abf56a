#include "data/tokenize.hpp"

#include <algorithm>
#include <deque>
#include <future>

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "core/thread_pool.hpp"

namespace meg {
namespace {

// How many skipped documents are named one by one before only counting them.
constexpr uint64_t kSkipReports = 10;

struct TokenizedBatch {
  std::vector<int32_t> tokens;     // every document's tokens, back to back
  std::vector<uint32_t> lengths;   // tokens per document
  uint64_t text_bytes = 0, raw_bytes = 0, skipped_bad = 0, skipped_empty = 0;
  std::vector<std::string> problems;  // messages of bad or empty documents, in order
};

TokenizedBatch tokenize_batch(const RecordBatch& batch, const Tokenizer& tokenizer, const TokenizeOptions& options) {
  TokenizedBatch out;
  out.raw_bytes = batch.raw_bytes;
  out.lengths.reserve(batch.records.size());
  std::string text, message;
  const auto prefix = tokenizer.special_prefix(), suffix = tokenizer.special_suffix();
  for (size_t i = 0; i < batch.records.size(); ++i) {
    const RecordProblem problem = extract_document(batch, i, options.format, text, message);
    if (problem != RecordProblem::kNone) {
      (problem == RecordProblem::kBad ? out.skipped_bad : out.skipped_empty)++;
      out.problems.push_back(message);
      if (!options.skip_bad) break;  // the first problem stops the run; nothing after it matters
      continue;
    }
    const size_t before = out.tokens.size();
    if (options.add_special_tokens) out.tokens.insert(out.tokens.end(), prefix.begin(), prefix.end());
    tokenizer.encode(text, out.tokens);
    if (options.add_special_tokens) out.tokens.insert(out.tokens.end(), suffix.begin(), suffix.end());
    if (options.append_eod) out.tokens.push_back(tokenizer.eod_id());
    out.lengths.push_back(static_cast<uint32_t>(out.tokens.size() - before));
    out.text_bytes += text.size();
  }
  return out;
}

uint64_t total_input_bytes(const std::vector<std::string>& inputs) {
  uint64_t total = 0;
  for (const auto& path : inputs) {
    struct stat st {};
    if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;  // unknown
    total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

void report_skips(const TokenizeStats& stats) {
  if (stats.skipped_bad + stats.skipped_empty > kSkipReports)
    log::warn("{} more skipped documents not shown", stats.skipped_bad + stats.skipped_empty - kSkipReports);
}

}  // namespace

TokenizeStats tokenize_inputs(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                              const TokenizeOptions& options, TokenStreamWriter& out) {
  TokenizeStats stats;
  Progress progress("tokenized", total_input_bytes(inputs));
  uint64_t done_before = 0;  // bytes of the inputs already finished
  uint64_t reported = 0;     // skipped documents named so far

  // Batches go to the pool in input order and come back through a queue of futures in the same
  // order, so the output order never depends on which thread finishes first. The queue's bound
  // keeps memory flat however large the input.
  ThreadPool pool(options.workers);
  const size_t max_in_flight = 2 * size_t(options.workers) + 1;
  std::deque<std::future<TokenizedBatch>> in_flight;

  auto drain_one = [&] {
    TokenizedBatch b = in_flight.front().get();
    in_flight.pop_front();
    for (const auto& m : b.problems) {
      if (!options.skip_bad) throw InputError(m);
      if (reported++ < kSkipReports) log::warn("skipped {}", m);
    }
    stats.skipped_bad += b.skipped_bad;
    stats.skipped_empty += b.skipped_empty;
    size_t at = 0;
    for (uint32_t n : b.lengths) {
      out.write_document(std::span<const int32_t>(b.tokens.data() + at, n));
      at += n;
    }
    stats.documents += b.lengths.size();
    stats.tokens += b.tokens.size();
    stats.text_bytes += b.text_bytes;
    progress.set(done_before + b.raw_bytes);
  };

  for (const auto& path : inputs) {
    RecordReader reader(path, options.format);
    for (;;) {
      auto batch = std::make_shared<RecordBatch>();
      if (!reader.next_batch(*batch, options.batch_bytes)) break;
      in_flight.push_back(pool.submit([batch, &tokenizer, &options] { return tokenize_batch(*batch, tokenizer, options); }));
      if (in_flight.size() >= max_in_flight) drain_one();
    }
    while (!in_flight.empty()) drain_one();
    done_before += reader.input().raw_consumed();
  }
  stats.input_bytes = done_before;
  progress.finish();
  report_skips(stats);
  return stats;
}

std::vector<std::string> read_documents(const std::vector<std::string>& inputs, const TokenizeOptions& options,
                                        TokenizeStats& stats) {
  std::vector<std::string> docs;
  std::string text, message;
  for (const auto& path : inputs) {
    RecordReader reader(path, options.format);
    RecordBatch batch;
    while (reader.next_batch(batch, options.batch_bytes)) {
      for (size_t i = 0; i < batch.records.size(); ++i) {
        const RecordProblem problem = extract_document(batch, i, options.format, text, message);
        if (problem == RecordProblem::kNone) {
          stats.text_bytes += text.size();
          docs.push_back(text);
          continue;
        }
        if (!options.skip_bad) throw InputError(message);
        if (stats.skipped_bad + stats.skipped_empty < kSkipReports) log::warn("skipped {}", message);
        (problem == RecordProblem::kBad ? stats.skipped_bad : stats.skipped_empty)++;
      }
    }
    stats.input_bytes += reader.input().raw_consumed();
  }
  stats.documents = docs.size();
  report_skips(stats);
  return docs;
}

uint64_t decode_stream(TokenStreamReader& in, const Tokenizer& tokenizer, const DocumentFormat& format,
                       ByteWriter& out) {
  if (in.header().vocab_size != uint32_t(tokenizer.vocab_size()))
    input_error("{}: token stream has a vocabulary of {} but the tokenizer has {}", in.bytes().path(),
                in.header().vocab_size, tokenizer.vocab_size());
  std::vector<int32_t> ids;
  std::string line;
  uint64_t docs = 0;
  while (in.next(ids)) {
    std::span<const int32_t> body(ids);
    if (!body.empty() && body.back() == in.header().eod_id) body = body.first(body.size() - 1);
    // The tokenizer's own special tokens around the document (--add-special-tokens) go too.
    const auto prefix = tokenizer.special_prefix(), suffix = tokenizer.special_suffix();
    if (!prefix.empty() && body.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), body.begin()))
      body = body.subspan(prefix.size());
    if (!suffix.empty() && body.size() >= suffix.size() && std::equal(suffix.begin(), suffix.end(), body.end() - ptrdiff_t(suffix.size())))
      body = body.first(body.size() - suffix.size());
    const std::string text = tokenizer.decode(body);
    if (format.jsonl) {
      // Decoded bytes need not be valid UTF-8 (a document cut inside a character); replace those
      // bytes rather than fail, so any stream can be inspected.
      line = nlohmann::json{{format.json_key, text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      line += '\n';
    } else {
      line = text;
      line += format.separator ? "\n" + *format.separator + "\n" : "\n";
    }
    out.write(line.data(), line.size());
    ++docs;
  }
  return docs;
}

}  // namespace meg
