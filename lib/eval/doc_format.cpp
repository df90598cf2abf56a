#include "eval/doc_format.hpp"

#include <algorithm>
#include <initializer_list>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "eval/python_text.hpp"
#include "eval/wikitext.hpp"

namespace meg {
namespace {

using nlohmann::json;

// One line's object and where it is, for the field lookups and their one-line errors.
struct Line {
  const json& obj;
  const std::string& where;
  const char* form;  // the fields this kind of line has, for "no such field" errors

  const json* find(std::initializer_list<const char*> names) const {
    for (const char* name : names)
      if (const auto it = obj.find(name); it != obj.end()) return &*it;
    return nullptr;
  }
  // The first of NAMES the line has; an InputError naming them all when it has none.
  const json& field(std::initializer_list<const char*> names) const {
    if (const json* v = find(names)) return *v;
    std::string list;
    for (const char* name : names) list += fmt::format("{}\"{}\"", list.empty() ? "" : " or ", name);
    input_error("{}: no {} field ({})", where, list, form);
  }
  std::string string(const char* name, const json& v) const {
    if (!v.is_string()) input_error("{}: \"{}\" is a {}, not a string", where, name, v.type_name());
    return v.get<std::string>();
  }
  std::string string(const char* name) const { return string(name, field({name})); }
  std::vector<std::string> strings(const char* name, const json& v) const {
    if (!v.is_array()) input_error("{}: \"{}\" is a {}, not an array of strings", where, name, v.type_name());
    std::vector<std::string> out;
    for (const json& s : v) {
      if (!s.is_string()) input_error("{}: \"{}\" holds a {}, not only strings", where, name, s.type_name());
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  // A choice number: an integer, or a string of digits (hellaswag's "label" is "0".."3").
  int64_t index(const char* name, const json& v) const {
    if (v.is_number_integer()) return json_as<int64_t>(v, fmt::format("{}: \"{}\"", where, name));
    if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      if (!s.empty() && s.size() < 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::stoll(s);
    }
    input_error("{}: \"{}\" is {}, not a choice number", where, name, v.dump());
  }
};

// hellaswag/utils.py's preprocess(): strip, " [title]" to ". ", drop "[...]" spans (not across
// lines, as re's "." does not match a newline), then one pass of "  " to " ".
std::string hellaswag_preprocess(std::string_view raw) {
  const std::string text = py::replace(py::strip(raw), " [title]", ". ");
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t close = text[i] == '[' ? text.find_first_of("]\n", i + 1) : std::string::npos;
    if (close != std::string::npos && text[close] == ']') {
      i = close + 1;
    } else {
      out += text[i++];
    }
  }
  return py::replace(out, "  ", " ");
}

// ARC's and OpenBookQA's {"text": [...], "label": [...]} choices and the answerKey among the labels.
int64_t labelled_choices(const Line& line, EvalDoc& doc, bool lstrip_key) {
  const json& choices = line.field({"choices"});
  if (!choices.is_object())
    input_error("{}: \"choices\" is a {}, not an object of \"text\" and \"label\"", line.where, choices.type_name());
  const Line inner{choices, line.where, "\"choices\" is {\"text\": [...], \"label\": [...]}"};
  doc.choices = inner.strings("choices.text", inner.field({"text"}));
  const std::vector<std::string> labels = inner.strings("choices.label", inner.field({"label"}));
  if (labels.size() != doc.choices.size())
    input_error("{}: \"choices\" has {} texts and {} labels", line.where, doc.choices.size(), labels.size());
  std::string key = line.string("answerKey");
  if (lstrip_key) key = std::string(py::lstrip(key));  // OpenBookQA's answerKey.lstrip()
  const auto it = std::find(labels.begin(), labels.end(), key);
  if (it == labels.end()) {
    std::string list;
    for (const auto& l : labels) list += (list.empty() ? "" : ", ") + l;
    input_error("{}: answerKey \"{}\" is not one of the choice labels ({})", line.where, key, list);
  }
  return it - labels.begin();
}

void multiple_choice(const Line& any, EvalDoc& doc) {
  int64_t gold = 0;
  const auto kind = [&](const char* form) { return Line{any.obj, any.where, form}; };
  if (any.find({"activity_label"})) {
    const Line line = kind("a hellaswag line has \"activity_label\", \"ctx_a\", \"ctx_b\", \"endings\", \"label\"");
    const std::string ctx = line.string("ctx_a") + " " + py::capitalize_ascii(line.string("ctx_b"));
    doc.text = hellaswag_preprocess(line.string("activity_label") + ": " + ctx);
    for (const std::string& ending : line.strings("endings", line.field({"endings"})))
      doc.choices.push_back(hellaswag_preprocess(ending));
    gold = line.index("label", line.field({"label"}));
  } else if (any.find({"goal"})) {
    const Line line = kind("a piqa line has \"goal\", \"sol1\", \"sol2\", \"label\"");
    doc.text = "Question: " + line.string("goal") + "\nAnswer:";
    doc.choices = {line.string("sol1"), line.string("sol2")};
    gold = line.index("label", line.field({"label"}));
  } else if (any.find({"question_stem"})) {
    const Line line = kind("an openbookqa line has \"question_stem\", \"choices\", \"answerKey\"");
    doc.text = line.string("question_stem");
    gold = labelled_choices(line, doc, true);
  } else if (any.find({"question"})) {
    const Line line = kind("an arc line has \"question\", \"choices\", \"answerKey\"");
    doc.text = "Question: " + line.string("question") + "\nAnswer:";
    gold = labelled_choices(line, doc, false);
  } else {
    const Line line = kind("see meg-eval(1) for the multiple-choice fields");
    const json& query = line.field({"query", "ctx"});
    doc.text = line.string(any.find({"query"}) ? "query" : "ctx", query);
    const json& choices = line.field({"choices", "endings"});
    doc.choices = line.strings(any.find({"choices"}) ? "choices" : "endings", choices);
    gold = line.index(any.find({"gold"}) ? "gold" : "label", line.field({"gold", "label"}));
  }
  if (doc.choices.empty()) input_error("{}: no choices", any.where);
  if (gold < 0 || static_cast<size_t>(gold) >= doc.choices.size())
    input_error("{}: gold {} is out of range for {} choices", any.where, gold, doc.choices.size());
  doc.gold = static_cast<int>(gold);
  doc.target = doc.choices[doc.gold];
}

}  // namespace

EvalDoc parse_doc(const json& obj, TaskType type, const std::string& where) {
  EvalDoc doc;
  switch (type) {
    case TaskType::perplexity: {
      const Line line{obj, where, "a perplexity line has \"text\", or WikiText's \"page\""};
      const bool page = !line.find({"text"}) && line.find({"page"});
      const std::string text = page ? line.string("page") : line.string("text");
      doc.words = py::count_words(text);
      doc.bytes = text.size();
      doc.target = page ? wikitext_detokenize(text) : text;
      break;
    }
    case TaskType::lambada: {
      const std::string text = Line{obj, where, "a lambada line has \"text\""}.string("text");
      const size_t space = text.rfind(' ');
      doc.text = space == std::string::npos ? "" : text.substr(0, space);
      doc.target = " " + (space == std::string::npos ? text : text.substr(space + 1));
      break;
    }
    case TaskType::multiple_choice:
      multiple_choice(Line{obj, where, ""}, doc);
      break;
  }
  return doc;
}

}  // namespace meg
