// Standard output, checked: a write that fails (a full disk, `> /dev/full`) is one line and exit
// 1 like any bad output file, never output lost under exit 0; a reader that went away (a closed
// pipe: `meg-blend --dump B | head -1`) ends the tool quietly, as SIGPIPE does.
#pragma once

#include <string_view>

namespace meg {

// Writes TEXT to stdout, flushed when FLUSH (streamed output); stdout_failed() when it fails.
void write_stdout(std::string_view text, bool flush = false);

// A write to stdout failed with errno ERR: for EPIPE the process ends by SIGPIPE, otherwise
// InputError "<stdout>: write failed: WHY".
[[noreturn]] void stdout_failed(int err);

// At the end of a tool: flushes std::cout and stdout and closes stdout, which is where the last
// buffered bytes (and, on some file systems, the errors of earlier ones) are written;
// stdout_failed() on any failure, one an earlier unchecked write left included.
void close_stdout();

}  // namespace meg
