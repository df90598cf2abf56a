// meg-tokenize's work, as library calls: documents in, token stream out (on many threads, in input
// order), the reverse, and collecting documents for tokenizer training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/byte_stream.hpp"
#include "data/document_reader.hpp"
#include "data/token_stream.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

struct TokenizeOptions {
  DocumentFormat format;
  bool append_eod = false;
  // The tokenizer's own special tokens around each document (a tokenizer.json post-processor's,
  // as Hugging Face's encode adds them by default); other tokenizers have none.
  bool add_special_tokens = true;
  bool skip_bad = false;       // skip malformed and empty documents instead of stopping
  unsigned workers = 1;
  size_t batch_bytes = 1 << 20;  // work handed to a thread at a time
};

struct TokenizeStats {
  uint64_t documents = 0, tokens = 0, text_bytes = 0, input_bytes = 0;
  uint64_t skipped_bad = 0, skipped_empty = 0;
};

// Tokenizes every document of INPUTS ("-" is stdin) and writes them to OUT in input order, whatever
// the number of workers. Bad input throws InputError naming the file and line (unless skip_bad).
TokenizeStats tokenize_inputs(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                              const TokenizeOptions& options, TokenStreamWriter& out);

// Reads the documents of INPUTS as text, for training a tokenizer.
std::vector<std::string> read_documents(const std::vector<std::string>& inputs, const TokenizeOptions& options,
                                        TokenizeStats& stats);

// Writes every document of IN back as text: one JSON object per line ({"text": ...}) when
// FORMAT.jsonl, else the text followed by a newline (or by the separator line). A trailing
// end-of-document token is dropped.
uint64_t decode_stream(TokenStreamReader& in, const Tokenizer& tokenizer, const DocumentFormat& format,
                       ByteWriter& out);

}  // namespace meg
