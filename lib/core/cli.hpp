// What every tool's main shares: option parsing through CLI11, the common options, a JSON settings
// file, and the mapping of errors to exit statuses (core/error.hpp).
//
//   int main(int argc, char** argv) {
//     CLI::App app{"meg-index: ...", "meg-index"};
//     ... app.add_option(...) ...
//     return meg::cli::run_tool(app, argc, argv, [&] { ...; return 0; });
//   }
#pragma once

#include <functional>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

namespace meg::cli {

// Adds --quiet, --version and --config FILE (a JSON object whose keys are long option names;
// options given on the command line win), and an example for --help.
void add_common_options(CLI::App& app, const std::string& example);

// Parses, runs BODY, closes stdout (core/stdout.hpp: output that did not get out is an error) and
// turns what escapes into an exit status: usage errors and InputError print one line and give 1,
// anything else prints "internal error" and gives 2. ON_FAILURE, when given,
// runs with that status after the line is printed (a distributed job aborts all its ranks there).
int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body,
             const std::function<void(int)>& on_failure = {});

// The long names (without dashes; every alias of each) of the options APP's user gave, on the
// command line or in the --config file, once APP has parsed: what a tool tells apart from the
// defaults it may take elsewhere (meg-pretrain, from a checkpoint).
std::set<std::string> given_options(const CLI::App& app);

// Worker threads to use when the user gave N (0 = all available cores); InputError for more than
// 4 per core (at least 64 allowed, never more than 1024).
unsigned resolve_workers(unsigned requested);

}  // namespace meg::cli
