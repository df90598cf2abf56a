// Prompts into generation requests: one text (--prompt), a JSONL file of prompts with their own
// settings (--prompts), or the lines of stdin as they arrive; and those requests shared by the
// ranks of a tensor-parallel group, of which only rank 0 reads the prompts.
//
// A prompt is tokenized as is; an empty prompt is the end-of-document token alone, the start of
// a new document (unconditional generation). A prompt longer than a sequence's length, text that
// is not UTF-8 or a malformed line is an InputError naming the place ("FILE:LINE: ...").
//
// JSONL: one object per line (blank lines are skipped), with "prompt" (a string) and optionally
// "max_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed" and "stop" (a
// string or a list of strings), which replace the command line's settings for that prompt. Any
// other key is an error, so a misspelt setting is never silently ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "infer/generator.hpp"

namespace meg {

class Comm;

// A prompt's settings when it gives none of its own: the command line's.
struct PromptSettings {
  int max_tokens = 64;
  SamplingParams sampling;
  std::vector<std::string> stop;

  void validate(const std::string& where) const;  // InputError "WHERE: ..." on a bad value
};

// The request for TEXT under SETTINGS, for sequences of MAX_LENGTH tokens; WHERE names it in errors.
GenerationRequest make_request(std::string_view text, const PromptSettings& settings, const Tokenizer& tokenizer,
                               int max_length, const std::string& where);
// The request for the token ids IDS (each in the tokenizer's vocabulary; at least one).
GenerationRequest make_request(std::vector<int32_t> ids, const PromptSettings& settings, const Tokenizer& tokenizer,
                               int max_length, const std::string& where);

struct PromptFile {
  std::vector<std::string> texts;  // each prompt's text, in file order
  std::vector<GenerationRequest> requests;
};

// Every prompt of the JSONL file PATH ("-": stdin), checked in full before any is answered.
PromptFile read_prompt_file(const std::string& path, const PromptSettings& settings, const Tokenizer& tokenizer,
                            int max_length);

// The lines of stdin, each a prompt, read as they arrive: a line that is not ready does not hold
// back the sequences already running. A bad line ends the input: the requests before it are still
// answered, then error() says what was wrong with it.
class StdinPromptSource final : public RequestSource {
 public:
  // ON_PROMPT(id, text) sees each prompt's text as its request is handed out (ids from 0).
  StdinPromptSource(const PromptSettings& settings, const Tokenizer& tokenizer, int max_length,
                    std::function<void(size_t, const std::string&)> on_prompt);

  std::optional<GenerationRequest> next(bool wait) override;
  // The bad line's InputError message, if one ended the input.
  const std::optional<std::string>& error() const { return error_; }

 private:
  std::optional<std::string> read_line(bool wait);  // nothing: the end, or (WAIT false) no whole line yet
  bool fill(bool wait);                             // reads what stdin has; false when nothing came

  const PromptSettings& settings_;
  const Tokenizer& tokenizer_;
  int max_length_;
  std::function<void(size_t, const std::string&)> on_prompt_;
  std::string buffer_;  // bytes read past the last whole line
  bool eof_ = false;
  uint64_t line_ = 0;
  size_t id_ = 0;
  std::optional<std::string> error_;
};

// The requests of SOURCE, which only member 0 of GROUP reads, handed out to every member in the
// same order (each member decodes the same bytes, member 0 too): members that run the same
// generator over them make the same model calls. Each next() is collective over the group, which
// waits for member 0's source.
class SharedRequestSource final : public RequestSource {
 public:
  // SOURCE: member 0's (ignored on the others, null there).
  SharedRequestSource(RequestSource* source, Comm& group);

  std::optional<GenerationRequest> next(bool wait) override;

 private:
  RequestSource* source_;
  Comm& group_;
};

}  // namespace meg
