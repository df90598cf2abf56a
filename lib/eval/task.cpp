#include "eval/task.hpp"

#include <filesystem>
#include <string_view>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "data/document_reader.hpp"
#include "data/indexed_dataset.hpp"
#include "eval/doc_format.hpp"

namespace meg {
namespace {

nlohmann::json parse_object(std::string_view raw, const std::string& file, uint64_t line) {
  nlohmann::json j;
  if (const std::string problem = parse_json_record(raw, file, line, j); !problem.empty()) throw InputError(problem);
  return j;
}

void read_jsonl(Task& task) {
  RecordReader reader(task.path, DocumentFormat{});
  RecordBatch batch;
  while (reader.next_batch(batch, 1 << 20)) {
    for (const auto& r : batch.records) {
      const std::string_view raw(batch.data.data() + r.begin, r.end - r.begin);
      if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank lines separate nothing
      const std::string where = fmt::format("{}:{}", task.path, r.line + 1);
      nlohmann::json obj = parse_object(raw, task.path, r.line + 1);
      EvalDoc doc = parse_doc(obj, task.type, where);
      doc.line = r.line + 1;
      if (task.type != TaskType::perplexity) doc.source = std::move(obj);  // few-shot sampling compares them
      task.docs.push_back(std::move(doc));
    }
  }
}

void read_indexed(Task& task, size_t limit) {
  const IndexedDataset data(task.path);
  if (!dtype_is_integer(data.dtype()))
    input_error("{}.idx: tokens of dtype {}, not integers", task.path, dtype_name(data.dtype()));
  const size_t n = limit > 0 ? std::min(limit, data.num_documents()) : data.num_documents();
  task.tokenized = true;
  task.docs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    task.docs[i].line = i;
    task.docs[i].tokens = data.document(i).to_vector();
  }
}

}  // namespace

TaskType parse_task_type(const std::string& name) {
  for (TaskType t : {TaskType::perplexity, TaskType::lambada, TaskType::multiple_choice})
    if (name == task_type_name(t)) return t;
  input_error("--task-type '{}': expected perplexity, lambada or multiple-choice", name);
}

const char* task_type_name(TaskType type) {
  switch (type) {
    case TaskType::perplexity:
      return "perplexity";
    case TaskType::lambada:
      return "lambada";
    case TaskType::multiple_choice:
      return "multiple-choice";
  }
  return "?";
}

Task read_task(const std::string& path, TaskType type, size_t limit) {
  Task task;
  task.path = path;
  task.type = type;
  namespace fs = std::filesystem;
  const bool prefix =
      type == TaskType::perplexity && path != "-" && !fs::is_regular_file(path) && fs::is_regular_file(path + ".idx");
  if (prefix) {
    read_indexed(task, limit);
  } else {
    read_jsonl(task);
  }
  if (task.docs.empty()) input_error("{}: no documents", path);
  task.scored = limit > 0 ? std::min(limit, task.docs.size()) : task.docs.size();
  return task;
}

std::string doc_where(const Task& task, const EvalDoc& doc) {
  return task.tokenized ? fmt::format("{}: document {}", task.path, doc.line)
                        : fmt::format("{}:{}", task.path, doc.line);
}

}  // namespace meg
