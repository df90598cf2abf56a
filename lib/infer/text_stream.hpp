// The text of a completion as its tokens come, released only in whole UTF-8 characters.
//
// A token's text is not always whole characters (GPT-2's byte-level tokens split a multi-byte
// character over several tokens; so do SentencePiece's byte-fallback pieces), and a token's text
// can depend on the token before it (SentencePiece drops the space of a sequence's first piece).
// So each new token's text is the difference between decoding a short window of tokens ending
// with it and the same window without it, the window starting a few tokens back (in the prompt at
// first); the window moves on each time text is released. While the window's text ends inside a
// character (an incomplete UTF-8 sequence, or the U+FFFD a decoder writes for one), nothing is
// released: the next token may complete it. This is the incremental detokenisation of vLLM and
// Hugging Face's TextStreamer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/utf8.hpp"  // to_valid_utf8
#include "tokenizer/tokenizer.hpp"

namespace meg {

class TextStream {
 public:
  // PROMPT: the tokens before the completion (its last few give the first token its context).
  TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt);

  // The text TOKEN completes: "" while it ends inside a character.
  std::string push(int32_t token);
  // The text held back at the end, any character left incomplete written as U+FFFD.
  std::string finish();

 private:
  std::string pending() const;  // the window's text beyond what has been released

  const Tokenizer& tokenizer_;
  std::vector<int32_t> tokens_;  // the prompt's last few tokens, then the completion's
  size_t prefix_ = 0;            // the window: tokens_[prefix_, end)
  size_t read_ = 0;              // tokens_[prefix_, read_) is the text released last
};

// The length of TEXT without an incomplete UTF-8 sequence at its end (one that more bytes could
// complete); TEXT's length when it ends on a whole character or on bytes no continuation mends.
size_t complete_utf8_length(const std::string& text);

}  // namespace meg
