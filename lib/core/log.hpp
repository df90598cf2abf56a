// Diagnostics on stderr, each line prefixed with the tool's name ("meg-index: ...").
#pragma once

#include <string>

#include <fmt/format.h>

namespace meg::log {

void set_program(std::string name);
const std::string& program();
void set_quiet(bool quiet);
bool quiet();
// Silences warnings too (the ranks of a distributed job other than 0 report only errors).
void set_errors_only(bool errors_only);
bool errors_only();

void write_line(const std::string& line);  // "PROGRAM: line\n", one write so lines never interleave

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (!quiet() && !errors_only()) write_line(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (!errors_only()) write_line("warning: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace meg::log
