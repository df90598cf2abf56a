#include "core/cli.hpp"

#include <algorithm>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"
#include "core/stdout.hpp"

namespace meg::cli {
namespace {

// CLI11 reads TOML/INI settings files by default; ours are JSON, flat or nested by subcommand. A
// null is an option not given (a checkpoint's record of the options holds them so): skipped, once
// its key is known to name an option.
class JsonConfig : public CLI::Config {
 public:
  explicit JsonConfig(const CLI::App& app) : app_(app) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override {
    return {};  // we never write settings files through CLI11
  }

  // CLI11 passes the open file only; its name is the value of --config, given by now.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string path = app_.get_config_ptr()->as<std::string>();
    std::stringstream text;
    text << input.rdbuf();
    const auto j = parse_json(text.str(), JsonSource{path});
    if (!j.is_object()) input_error("{}: a settings file holds a JSON object, not {}", path, j.type_name());
    std::vector<CLI::ConfigItem> items;
    collect(j, {}, items);
    return items;
  }

 private:
  void collect(const nlohmann::json& j, const std::vector<std::string>& parents,
               std::vector<CLI::ConfigItem>& items) const {
    for (const auto& [key, value] : j.items()) {
      // A null, and an empty text or list (what a record holds for an option left empty), is an
      // option not given; its key must still name one.
      if (value.is_null() || (value.is_string() && value.get_ref<const std::string&>().empty()) ||
          (value.is_array() && value.empty())) {
        if (parents.empty() && app_.get_option_no_throw("--" + key) == nullptr) throw CLI::ConfigError::Extras(key);
        continue;
      }
      if (value.is_object()) {
        auto p = parents;
        p.push_back(key);
        collect(value, p, items);
        continue;
      }
      CLI::ConfigItem item;
      item.parents = parents;
      item.name = key;
      if (value.is_array()) {
        for (const auto& v : value) item.inputs.push_back(scalar(v));
      } else if (value.is_boolean()) {
        item.inputs.push_back(value.get<bool>() ? "true" : "false");
      } else {
        item.inputs.push_back(scalar(value));
      }
      items.push_back(std::move(item));
    }
  }

  static std::string scalar(const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
  }

  const CLI::App& app_;
};

}  // namespace

void add_common_options(CLI::App& app, const std::string& example) {
  app.set_version_flag("--version", version_line(app.get_name()), "Print the version, the commit and the build");
  app.add_flag_callback("-q,--quiet", [] { log::set_quiet(true); }, "Print no progress or summary");
  app.config_formatter(std::make_shared<JsonConfig>(app));
  app.set_config("--config", "", "Read options from a JSON settings file (command line wins)");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error, not ignored
  app.footer("Example:\n  " + example);
}

namespace {

// CLI11's answer to --help or --version, written and checked as any output of a tool (CLI11's own
// std::endl would flush it where a failure's errno is lost).
int answer(const CLI::App& app, const CLI::Error& e) {
  std::ostringstream out;
  const int status = app.exit(e, out);
  try {
    write_stdout(out.str());
    close_stdout();
  } catch (const InputError& failed) {
    log::write_line(failed.what());
    return kExitBadInput;
  }
  return status;
}

// The edit distance of A and B (optimal string alignment: a swap of neighbours counts one).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The long option name of APP (without dashes; Megatron's names included) nearest to WORD, when
// it is near enough to be what a typo of it meant: at most a third of WORD's letters off.
std::optional<std::string> nearest_option(const CLI::App& app, const std::string& word) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames())
      if (const size_t d = edit_distance(word, name); d < best_distance) {
        best = name;
        best_distance = d;
      }
  return best;
}

// The line for an error CLI11 found. An unknown option, or an unknown key of the settings file,
// gets the nearest option name as a suggestion.
std::string parse_error_line(const CLI::App& app, const CLI::ParseError& e) {
  // Errors found in the settings file name it, as every diagnostic names its file.
  const CLI::Option* config = app.get_config_ptr();
  const std::string where = config != nullptr && config->count() > 0 ? config->as<std::string>() + ": " : "";
  std::string what = e.what();
  if (const auto at = what.find("INI was not able to parse "); at != std::string::npos) {
    const std::string key = what.substr(at + 26);  // CLI11 words it for INI files
    what = "unknown setting '" + key + "'";
    if (const auto near = nearest_option(app, key)) what += "; did you mean '" + *near + "'?";
  } else if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    for (const std::string& arg : app.remaining()) {
      if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
      const std::string name = arg.substr(2, arg.find('=') - 2);
      what = "unknown option --" + name;
      if (const auto near = nearest_option(app, name)) what += "; did you mean --" + *near + "?";
      break;
    }
  }
  return where + what + " (try --help)";
}

}  // namespace

int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body,
             const std::function<void(int)>& on_failure) {
  log::set_program(app.get_name());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return answer(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return answer(app, e);
  } catch (const CLI::CallForVersion& e) {
    return answer(app, e);
  } catch (const InputError& e) {  // a settings file that is not JSON: the line names it already
    log::write_line(e.what());
    return kExitBadInput;
  } catch (const CLI::ParseError& e) {
    log::write_line(parse_error_line(app, e));
    return kExitBadInput;
  }
  int status = kExitOk;
  try {
    const int done = body();
    close_stdout();  // output lost to a full disk is a failure, not "done"
    return done;
  } catch (const InputError& e) {
    log::write_line(e.what());
    status = kExitBadInput;
  } catch (const std::exception& e) {
    log::write_line(std::string("internal error: ") + e.what());
    status = kExitInternal;
  }
  if (on_failure) on_failure(status);
  return status;
}

std::set<std::string> given_options(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0)
      for (const auto& name : o->get_lnames()) given.insert(name);
  return given;
}

unsigned resolve_workers(unsigned requested) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (requested == 0) return cores;
  // Each worker is a thread with its own buffers: far more of them than cores only exhausts the
  // process limit.
  const unsigned limit = std::clamp(4 * cores, 64u, 1024u);
  if (requested > limit)
    input_error("--workers {}: too many threads; at most {} here (4 per core, between 64 and 1024)", requested,
                limit);
  return requested;
}

}  // namespace meg::cli
