// An eval task file (lm-evaluation-harness JSONL) read as meg-eval reads it: the documents, then
// the requests with few-shot examples, tokenized. The first byte picks the task type.
#include "eval/fewshot.hpp"
#include "eval/requests.hpp"
#include "eval/task.hpp"
#include "fuzz_input.hpp"
#include "gpt2_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto type = meg::TaskType(data[0] % 3);
  const std::string path = meg::fuzz::write_file("task.jsonl", {data + 1, size - 1});
  const meg::Tokenizer& tokenizer = meg::fuzz::gpt2_tokenizer();
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::Task task = meg::read_task(path, type, 0);
    meg::FewshotSampler fewshot(task.docs, 2, /*same_file=*/true, 1234, path);
    meg::build_requests(task, tokenizer, &fewshot, 256, tokenizer.vocab_size());
  });
}
