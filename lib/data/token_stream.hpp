// The token stream: what meg-tokenize writes and meg-index reads (format in man/meg-formats.5).
//
//   header   "MEGTOKS\0", u32 version (1), u32 vocab size, i32 end-of-document id (-1: none),
//            u8 bytes per token (2 or 4), 3 zero bytes, u64 tokenizer fingerprint      (32 bytes)
//   document u32 token count n (< 0xFFFFFFFF), then n tokens, little-endian           (repeated)
//   trailer  u32 0xFFFFFFFF, u64 documents, u64 tokens
//
// The trailer proves the stream is whole: a writer that died half-way leaves none, and readers
// refuse such a stream. Streams may be concatenated (cat a b | meg-index) when their headers
// agree, and the whole may be zstd-compressed (readers detect that by themselves).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/byte_stream.hpp"
#include "data/indexed_dataset.hpp"

namespace meg {

struct TokenStreamHeader {
  uint32_t version = 1;
  uint32_t vocab_size = 0;
  int32_t eod_id = -1;
  uint8_t token_bytes = 4;  // 2 when the vocabulary fits in 16 bits
  uint64_t tokenizer_fingerprint = 0;

  static TokenStreamHeader for_vocab(uint32_t vocab_size, int32_t eod_id, uint64_t fingerprint);
  bool compatible_with(const TokenStreamHeader& other) const;
};

class TokenStreamWriter {
 public:
  TokenStreamWriter(ByteWriter& out, const TokenStreamHeader& header);
  void write_document(std::span<const int32_t> tokens);
  void finish();  // writes the trailer; the ByteWriter's commit() is the caller's

  uint64_t documents() const { return documents_; }
  uint64_t tokens() const { return tokens_; }

 private:
  ByteWriter& out_;
  TokenStreamHeader header_;
  uint64_t documents_ = 0, tokens_ = 0;
  std::vector<uint8_t> buf_;
};

class TokenStreamReader {
 public:
  explicit TokenStreamReader(const std::string& path);  // "-" is stdin

  const TokenStreamHeader& header() const { return header_; }
  // Reads the next document into TOKENS; false once the (last) trailer has been read.
  bool next(std::vector<int32_t>& tokens);
  // The same without a copy: DOC views the stream's own bytes until the next call.
  bool next(TokenView& doc);

  uint64_t documents() const { return documents_; }
  uint64_t tokens() const { return tokens_; }
  const ByteReader& bytes() const { return in_; }

 private:
  void read_header(TokenStreamHeader& header);
  [[noreturn]] void truncated(uint64_t at, const char* what);  // AT: where the cut item starts

  ByteReader in_;
  TokenStreamHeader header_;
  uint64_t documents_ = 0, tokens_ = 0;              // over all concatenated streams
  uint64_t part_documents_ = 0, part_tokens_ = 0;    // since the current header
  std::vector<uint8_t> buf_;
};

}  // namespace meg
