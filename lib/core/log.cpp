#include "core/log.hpp"

#include <unistd.h>

namespace meg::log {
namespace {
std::string g_program = "meg";
bool g_quiet = false;
bool g_errors_only = false;
}  // namespace

void set_program(std::string name) { g_program = std::move(name); }
const std::string& program() { return g_program; }
void set_quiet(bool quiet) { g_quiet = quiet; }
bool quiet() { return g_quiet; }
void set_errors_only(bool errors_only) { g_errors_only = errors_only; }
bool errors_only() { return g_errors_only; }

void write_line(const std::string& line) {
  const std::string out = g_program + ": " + line + "\n";
  // A single write(2) keeps lines whole when several threads or processes share stderr.
  ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

}  // namespace meg::log
