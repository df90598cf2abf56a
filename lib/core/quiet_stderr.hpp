// Silences the process's stderr (file descriptor 2) for a scope, for libraries that write to it
// directly and report their failures by value as well: SentencePiece logs its trainer's options
// before it reads the option that would quiet it, and the samples of a failing self-test at load.
// Meg's own diagnostics stay one line, made from what the call returns.
#pragma once

namespace meg {

class QuietStderr {
 public:
  QuietStderr();
  ~QuietStderr();  // stderr back as it was
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_ = -1;  // the descriptor stderr was, or -1 where it could not be set aside
};

}  // namespace meg
