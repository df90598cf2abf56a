// Where completions go: streamed text, or JSON lines; either way in the order of the prompts,
// whatever order the generator finishes them in.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "infer/generator.hpp"

namespace meg {

// A sink that also learns the text of each prompt, before its completion is done.
class PromptOutput : public CompletionSink {
 public:
  virtual void prompt(size_t id, const std::string& text) = 0;
};

// Text as it is produced: the text of the first unfinished prompt goes out at once, flushed piece
// by piece; later prompts' text waits until every prompt before them is answered. A newline
// follows each completion. With ECHO, each prompt's text comes before its completion.
class TextOutput final : public PromptOutput {
 public:
  // WRITE(text, flush) puts text out, flushing it through when FLUSH.
  TextOutput(std::function<void(std::string_view, bool)> write, bool echo);

  void prompt(size_t id, const std::string& text) override;  // before any text of ID
  void text(size_t id, std::string_view text) override;
  void done(size_t id, Completion completion) override;

 private:
  struct Pending {
    std::string prompt, text;
    bool done = false;
  };
  void start_head();  // puts out the new first prompt's echo and what it has so far

  std::function<void(std::string_view, bool)> write_;
  bool echo_;
  size_t head_ = 0;           // the first unfinished prompt
  bool head_started_ = false;  // its echo and text so far are out
  std::map<size_t, Pending> pending_;
};

// One JSON object per prompt, on a line of its own:
//   {"id": ID, "prompt": TEXT, "completion": TEXT, "completion_ids": [...], "finish_reason": R}
class JsonlOutput final : public PromptOutput {
 public:
  // WRITE_LINE(line) puts out one line, its newline included.
  explicit JsonlOutput(std::function<void(std::string_view)> write_line);

  void prompt(size_t id, const std::string& text) override;
  void text(size_t, std::string_view) override {}
  void done(size_t id, Completion completion) override;

 private:
  std::function<void(std::string_view)> write_line_;
  size_t head_ = 0;
  std::map<size_t, std::string> prompts_, lines_;  // prompts not yet done; lines not yet written
};

}  // namespace meg
