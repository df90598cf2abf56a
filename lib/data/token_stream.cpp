#include "data/token_stream.hpp"

#include <algorithm>
#include <cstring>

#include "core/bytes.hpp"
#include "core/error.hpp"

namespace meg {
namespace {
constexpr char kMagic[8] = {'M', 'E', 'G', 'T', 'O', 'K', 'S', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kTrailerMark = 0xFFFFFFFFu;
constexpr size_t kHeaderSize = 32;

}  // namespace

TokenStreamHeader TokenStreamHeader::for_vocab(uint32_t vocab_size, int32_t eod_id, uint64_t fingerprint) {
  TokenStreamHeader h;
  h.vocab_size = vocab_size;
  h.eod_id = eod_id;
  h.token_bytes = vocab_size <= 65536 ? 2 : 4;
  h.tokenizer_fingerprint = fingerprint;
  return h;
}

bool TokenStreamHeader::compatible_with(const TokenStreamHeader& o) const {
  return vocab_size == o.vocab_size && eod_id == o.eod_id && token_bytes == o.token_bytes &&
         tokenizer_fingerprint == o.tokenizer_fingerprint;
}

// ---------------------------------------------------------------------------------------------

TokenStreamWriter::TokenStreamWriter(ByteWriter& out, const TokenStreamHeader& header) : out_(out), header_(header) {
  std::vector<uint8_t> b(std::begin(kMagic), std::end(kMagic));
  append_bytes<uint32_t>(b, kVersion);
  append_bytes<uint32_t>(b, header.vocab_size);
  append_bytes<int32_t>(b, header.eod_id);
  append_bytes<uint8_t>(b, header.token_bytes);
  append_bytes<uint8_t>(b, 0), append_bytes<uint8_t>(b, 0), append_bytes<uint8_t>(b, 0);
  append_bytes<uint64_t>(b, header.tokenizer_fingerprint);
  out_.write(b.data(), b.size());
}

void TokenStreamWriter::write_document(std::span<const int32_t> tokens) {
  if (tokens.size() >= kTrailerMark) throw std::runtime_error("document too long for the token stream");
  buf_.clear();
  append_bytes<uint32_t>(buf_, static_cast<uint32_t>(tokens.size()));
  const size_t at = buf_.size();
  buf_.resize(at + tokens.size() * header_.token_bytes);
  if (header_.token_bytes == 2) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto t = static_cast<uint16_t>(tokens[i]);
      std::memcpy(buf_.data() + at + 2 * i, &t, 2);
    }
  } else {
    std::memcpy(buf_.data() + at, tokens.data(), tokens.size() * 4);
  }
  out_.write(buf_.data(), buf_.size());
  ++documents_;
  tokens_ += tokens.size();
}

void TokenStreamWriter::finish() {
  buf_.clear();
  append_bytes<uint32_t>(buf_, kTrailerMark);
  append_bytes<uint64_t>(buf_, documents_);
  append_bytes<uint64_t>(buf_, tokens_);
  out_.write(buf_.data(), buf_.size());
}

// ---------------------------------------------------------------------------------------------

TokenStreamReader::TokenStreamReader(const std::string& path) : in_(path) { read_header(header_); }

void TokenStreamReader::truncated(uint64_t at, const char* what) {
  input_error("{}: offset {}: token stream ends inside {} (truncated: was the writer interrupted?)", in_.path(), at,
              what);
}

void TokenStreamReader::read_header(TokenStreamHeader& h) {
  const uint64_t at = in_.offset();
  uint8_t b[kHeaderSize];
  size_t got = 0;
  if (!in_.read_exact(b, kHeaderSize, &got)) {
    if (got == 0 && at == 0) input_error("{}: empty input, not a token stream", in_.path());
    if (got < 8 || std::memcmp(b, kMagic, 8) != 0)
      input_error("{}: offset {}: not a meg token stream (bad magic)", in_.path(), at);
    truncated(at, "the header");
  }
  if (std::memcmp(b, kMagic, 8) != 0)
    input_error("{}: offset {}: not a meg token stream (bad magic; meg-tokenize writes these)", in_.path(), at);
  h.version = load_unaligned<uint32_t>(b + 8);
  if (h.version != kVersion)
    input_error("{}: offset {}: token stream version {} is not supported (this meg reads version {})", in_.path(),
                at + 8, h.version, kVersion);
  h.vocab_size = load_unaligned<uint32_t>(b + 12);
  h.eod_id = load_unaligned<int32_t>(b + 16);
  h.token_bytes = b[20];
  h.tokenizer_fingerprint = load_unaligned<uint64_t>(b + 24);
  if (h.token_bytes != 2 && h.token_bytes != 4)
    input_error("{}: offset {}: bad token width {} (must be 2 or 4)", in_.path(), at + 20, h.token_bytes);
  if (h.vocab_size == 0 || (h.token_bytes == 2 && h.vocab_size > 65536))
    input_error("{}: offset {}: bad vocabulary size {}", in_.path(), at + 12, h.vocab_size);
  part_documents_ = part_tokens_ = 0;
}

namespace {
// The largest token of a document, in one pass the compiler vectorizes.
template <typename T>
int64_t max_token(const uint8_t* p, uint32_t n) {
  T m = 0;
  for (uint32_t i = 0; i < n; ++i) m = std::max(m, load_unaligned<T>(p + sizeof(T) * i));
  return m;
}
}  // namespace

bool TokenStreamReader::next(TokenView& doc) {
  for (;;) {
    const uint64_t at = in_.offset();
    uint32_t n;
    if (!in_.read_exact(&n, 4)) truncated(at, "a document length");
    if (n == kTrailerMark) {
      uint64_t counts[2];
      if (!in_.read_exact(counts, sizeof(counts))) truncated(at, "the trailer");
      if (counts[0] != part_documents_ || counts[1] != part_tokens_)
        input_error("{}: offset {}: trailer counts {} documents and {} tokens but the stream holds {} and {}",
                    in_.path(), at, counts[0], counts[1], part_documents_, part_tokens_);
      if (in_.at_end()) return false;
      TokenStreamHeader next_header;  // another stream concatenated after this one
      read_header(next_header);
      if (!next_header.compatible_with(header_))
        input_error("{}: offset {}: concatenated token streams come from different tokenizers", in_.path(),
                    in_.offset() - kHeaderSize);
      continue;
    }
    if (!in_.read_counted(buf_, uint64_t(n) * header_.token_bytes)) truncated(at, "a document");
    doc = {buf_.data(), n, header_.token_bytes == 2 ? TokenDtype::kUint16 : TokenDtype::kInt32};
    // Signed 4-byte tokens are compared as unsigned, so negatives fail the same test.
    const int64_t max = header_.token_bytes == 2 ? max_token<uint16_t>(buf_.data(), n) : max_token<uint32_t>(buf_.data(), n);
    if (max >= header_.vocab_size) {
      size_t i = 0;
      while (uint64_t(uint32_t(doc[i])) < header_.vocab_size) ++i;
      input_error("{}: offset {}: token {} is outside the vocabulary of {} (corrupt stream?)", in_.path(),
                  at + 4 + i * header_.token_bytes, doc[i], header_.vocab_size);
    }
    ++documents_, ++part_documents_;
    tokens_ += n, part_tokens_ += n;
    return true;
  }
}

bool TokenStreamReader::next(std::vector<int32_t>& tokens) {
  TokenView doc;
  if (!next(doc)) return false;
  tokens.resize(doc.size);
  doc.copy_to(tokens.data(), 0, doc.size);
  return true;
}

}  // namespace meg
