// TextOutput and JsonlOutput: completions in prompt order.
#include "infer/outputs.hpp"

#include <nlohmann/json.hpp>

namespace meg {

TextOutput::TextOutput(std::function<void(std::string_view, bool)> write, bool echo)
    : write_(std::move(write)), echo_(echo) {}

void TextOutput::start_head() {
  const auto it = pending_.find(head_);
  if (head_started_ || it == pending_.end()) return;
  if (echo_) write_(it->second.prompt, false);
  write_(it->second.text, true);
  it->second.text.clear();
  head_started_ = true;
}

void TextOutput::prompt(size_t id, const std::string& text) {
  pending_[id].prompt = text;
  if (id == head_) start_head();
}

void TextOutput::text(size_t id, std::string_view text) {
  if (id == head_ && head_started_)
    write_(text, true);
  else
    pending_[id].text += text;
}

void TextOutput::done(size_t id, Completion) {
  pending_[id].done = true;
  for (auto it = pending_.find(head_); it != pending_.end() && it->second.done; it = pending_.find(head_)) {
    start_head();
    write_("\n", true);
    pending_.erase(it);
    ++head_;
    head_started_ = false;
  }
  start_head();
}

JsonlOutput::JsonlOutput(std::function<void(std::string_view)> write_line) : write_line_(std::move(write_line)) {}

void JsonlOutput::prompt(size_t id, const std::string& text) { prompts_[id] = text; }

void JsonlOutput::done(size_t id, Completion c) {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["prompt"] = std::move(prompts_[id]);
  j["completion"] = std::move(c.text);
  j["completion_ids"] = std::move(c.ids);
  j["finish_reason"] = finish_reason_name(c.finish);
  prompts_.erase(id);
  // A prompt given as token ids may decode to bytes that are not UTF-8 (part of a character).
  lines_[id] = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  for (auto it = lines_.find(head_); it != lines_.end(); it = lines_.find(head_)) {
    write_line_(it->second);
    lines_.erase(it);
    ++head_;
  }
}

}  // namespace meg
