// Diagnostics on stderr, each line prefixed with the tool's name ("meg-index: ...").
#pragma once

#include <string>

#include <fmt/format.h>

namespace meg::log {

void set_program(std::string name);
const std::string& program();
void set_quiet(bool quiet);
bool quiet();

void write_line(const std::string& line);  // "PROGRAM: line\n", one write so lines never interleave

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (!quiet()) write_line(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write_line("warning: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace meg::log
