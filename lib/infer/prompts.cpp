// Prompts from the command line, a JSONL file or stdin, into generation requests; requests shared
// over a group.
#include "infer/prompts.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "parallel/comm.hpp"

namespace meg {

void PromptSettings::validate(const std::string& where) const {
  if (max_tokens < 1) input_error("{}: max tokens {} must be at least 1", where, max_tokens);
  sampling.validate(where);
  for (const std::string& s : stop) {
    if (s.empty()) input_error("{}: a stop string is empty", where);
    if (!valid_utf8(s)) input_error("{}: stop string '{}' is not valid UTF-8", where, s);
  }
}

GenerationRequest make_request(std::string_view text, const PromptSettings& settings, const Tokenizer& tokenizer,
                               int max_length, const std::string& where) {
  size_t bad = 0;
  if (!valid_utf8(text, &bad)) input_error("{}: the prompt is not valid UTF-8 (byte {})", where, bad);
  // The tokenizer's own start of a sequence first (Llama 3's <|begin_of_text|>), as Hugging Face's
  // generation encodes a prompt; its end (BERT's [SEP]) would end the prompt, so it stays out.
  const auto prefix = tokenizer.special_prefix();
  std::vector<int32_t> ids(prefix.begin(), prefix.end());
  tokenizer.encode(text, ids);
  if (ids.empty()) ids.push_back(tokenizer.eod_id());  // the start of a new document
  return make_request(std::move(ids), settings, tokenizer, max_length, where);
}

GenerationRequest make_request(std::vector<int32_t> ids, const PromptSettings& settings, const Tokenizer& tokenizer,
                               int max_length, const std::string& where) {
  if (ids.empty()) input_error("{}: the prompt has no tokens", where);
  for (const int32_t id : ids)
    if (id < 0 || id >= tokenizer.vocab_size())
      input_error("{}: prompt token {} is outside the tokenizer's vocabulary [0, {})", where, id,
                  tokenizer.vocab_size());
  if (ids.size() > size_t(max_length))
    input_error("{}: the prompt is {} tokens, more than the {} a sequence holds (--max-length)", where, ids.size(),
                max_length);
  GenerationRequest r;
  r.prompt = std::move(ids);
  r.max_tokens = settings.max_tokens;
  r.sampling = settings.sampling;
  r.stop = settings.stop;
  return r;
}

namespace {

// One JSONL line's prompt, as text or as token ids, and settings (the defaults replaced by its
// own keys).
struct PromptLine {
  std::string prompt;
  std::optional<std::vector<int32_t>> ids;
  PromptSettings settings;
};

// Line LINE of FILE.
PromptLine parse_prompt_line(std::string_view text, const PromptSettings& defaults, const std::string& file,
                             uint64_t line) {
  const std::string where = fmt::format("{}:{}", file, line);
  nlohmann::json j;
  if (std::string problem = parse_json_record(text, file, line, j); !problem.empty()) throw InputError(problem);
  auto number = [&](const std::string& key, const nlohmann::json& v) {
    return json_as<double>(v, fmt::format("{}: \"{}\"", where, key));
  };
  auto integer = [&](const std::string& key, const nlohmann::json& v, int lo) {
    // Unsigned covers the non-negative integers; a negative one is below every bound used here.
    if (!v.is_number_unsigned() || v.get<uint64_t>() < uint64_t(lo) ||
        v.get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
      input_error("{}: \"{}\" must be an integer of at least {}", where, key, lo);
    return int(v.get<uint64_t>());
  };
  PromptLine p{{}, {}, defaults};
  bool has_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "prompt") {
      if (!v.is_string()) input_error("{}: \"prompt\" must be a string", where);
      p.prompt = v.get<std::string>();
      has_prompt = true;
    } else if (key == "prompt_ids") {
      if (!v.is_array()) input_error("{}: \"prompt_ids\" must be a list of token ids", where);
      p.ids.emplace();
      for (const auto& id : v) p.ids->push_back(integer(key, id, 0));
    } else if (key == "max_tokens") {
      p.settings.max_tokens = integer(key, v, 1);
    } else if (key == "temperature") {
      p.settings.sampling.temperature = number(key, v);
    } else if (key == "top_k") {
      p.settings.sampling.top_k = integer(key, v, 0);
    } else if (key == "top_p") {
      p.settings.sampling.top_p = number(key, v);
    } else if (key == "repetition_penalty") {
      p.settings.sampling.repetition_penalty = number(key, v);
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) input_error("{}: \"seed\" must be an integer of at least 0", where);
      p.settings.sampling.seed = v.get<uint64_t>();
    } else if (key == "stop") {
      p.settings.stop.clear();
      for (const auto& s : v.is_array() ? v : nlohmann::json::array({v})) {
        if (!s.is_string()) input_error("{}: \"stop\" must be a string or a list of strings", where);
        p.settings.stop.push_back(s.get<std::string>());
      }
    } else {
      input_error("{}: unknown key \"{}\" (known: prompt, prompt_ids, max_tokens, temperature, top_k, top_p, "
                  "repetition_penalty, seed, stop)",
                  where, key);
    }
  }
  if (has_prompt == p.ids.has_value()) input_error("{}: give either \"prompt\" or \"prompt_ids\"", where);
  p.settings.validate(where);
  return p;
}

std::string read_all(const std::string& path) {
  ByteReader in(path);
  std::string data;
  char chunk[1 << 16];
  while (const size_t n = in.read(chunk, sizeof chunk)) data.append(chunk, n);
  return data;
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

PromptFile read_prompt_file(const std::string& path, const PromptSettings& settings, const Tokenizer& tokenizer,
                            int max_length) {
  const std::string data = read_all(path);
  const std::string name = path == "-" ? "stdin" : path;
  PromptFile file;
  uint64_t line = 0;
  for (size_t pos = 0; pos < data.size();) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    const std::string_view text(data.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (blank(text)) continue;
    const std::string where = fmt::format("{}:{}", name, line);
    PromptLine p = parse_prompt_line(text, settings, name, line);
    if (p.ids) {
      file.requests.push_back(make_request(std::move(*p.ids), p.settings, tokenizer, max_length, where));
      p.prompt = tokenizer.decode(file.requests.back().prompt);
    } else {
      file.requests.push_back(make_request(p.prompt, p.settings, tokenizer, max_length, where));
    }
    file.texts.push_back(std::move(p.prompt));
  }
  return file;
}

StdinPromptSource::StdinPromptSource(const PromptSettings& settings, const Tokenizer& tokenizer, int max_length,
                                     std::function<void(size_t, const std::string&)> on_prompt)
    : settings_(settings), tokenizer_(tokenizer), max_length_(max_length), on_prompt_(std::move(on_prompt)) {}

std::optional<GenerationRequest> StdinPromptSource::next(bool wait) {
  if (error_) return std::nullopt;
  const std::optional<std::string> text = read_line(wait);
  if (!text) return std::nullopt;
  try {
    GenerationRequest r = make_request(*text, settings_, tokenizer_, max_length_, fmt::format("stdin:{}", line_));
    on_prompt_(id_++, *text);
    return r;
  } catch (const InputError& e) {
    error_ = e.what();
    return std::nullopt;
  }
}

std::optional<std::string> StdinPromptSource::read_line(bool wait) {
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.ends_with('\r')) line.pop_back();
      ++line_;
      return line;
    }
    if (eof_) {
      if (buffer_.empty()) return std::nullopt;
      ++line_;  // a last line without its newline
      return std::exchange(buffer_, {});
    }
    if (!fill(wait)) return std::nullopt;
  }
}

bool StdinPromptSource::fill(bool wait) {
  if (!wait) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;  // readable also covers the end of the input
  }
  char chunk[1 << 16];
  const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
  if (n < 0) {
    if (errno == EINTR) return true;
    system_error("stdin", "read");
  }
  if (n == 0)
    eof_ = true;
  else
    buffer_.append(chunk, size_t(n));
  return true;
}

namespace {

nlohmann::json request_to_json(const GenerationRequest& r) {
  const SamplingParams& s = r.sampling;
  return {{"prompt", r.prompt},          {"max_tokens", r.max_tokens},
          {"temperature", s.temperature}, {"top_k", s.top_k},
          {"top_p", s.top_p},             {"repetition_penalty", s.repetition_penalty},
          {"seed", s.seed},               {"stop", r.stop}};
}

GenerationRequest request_from_json(const nlohmann::json& j) {
  GenerationRequest r;
  r.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.max_tokens = j.at("max_tokens").get<int>();
  r.sampling.temperature = j.at("temperature").get<double>();
  r.sampling.top_k = j.at("top_k").get<int>();
  r.sampling.top_p = j.at("top_p").get<double>();
  r.sampling.repetition_penalty = j.at("repetition_penalty").get<double>();
  r.sampling.seed = j.at("seed").get<uint64_t>();
  r.stop = j.at("stop").get<std::vector<std::string>>();
  return r;
}

}  // namespace

SharedRequestSource::SharedRequestSource(RequestSource* source, Comm& group) : source_(source), group_(group) {}

// Member 0 sends the request's size (0: none) and then the request, in CBOR, whose numbers are
// exact (a double keeps every bit).
std::optional<GenerationRequest> SharedRequestSource::next(bool wait) {
  if (group_.size() == 1) return source_->next(wait);
  std::vector<uint8_t> bytes;
  if (group_.rank() == 0) {
    const std::optional<GenerationRequest> r = source_->next(wait);
    if (r) bytes = nlohmann::json::to_cbor(request_to_json(*r));
  }
  uint64_t size = bytes.size();
  group_.broadcast(&size, sizeof size, 0);
  if (size == 0) return std::nullopt;
  bytes.resize(size);
  group_.broadcast(bytes.data(), size, 0);
  return request_from_json(nlohmann::json::from_cbor(bytes));
}

}  // namespace meg
