// The JSONL fields meg-eval reads, named as in lm-evaluation-harness's public task files (the
// Hugging Face datasets they load), and the prompts its task configs build from them:
//
//   perplexity       {"text"}   scored as it is (pile-style tasks)
//                    {"page"}   WikiText: scored after wikitext_detokenize; words and bytes counted
//                               on the page as given (lm-eval's wikitext task)
//   lambada          {"text"}   context: the words before the last (split on " "); target: " " and
//                               the last word (lambada_openai)
//   multiple-choice, by the first of these a line matches:
//     hellaswag      {"activity_label", "ctx_a", "ctx_b", "endings", "label"}: the dataset's own
//                    rows, prompt and endings preprocessed as lm-eval's hellaswag/utils.py does
//     piqa           {"goal", "sol1", "sol2", "label"}: "Question: GOAL\nAnswer:"
//     openbookqa     {"question_stem", "choices": {"text", "label"}, "answerKey"}: QUESTION_STEM
//                    (answerKey's leading whitespace stripped)
//     arc            {"question", "choices": {"text", "label"}, "answerKey"}:
//                    "Question: QUESTION\nAnswer:"
//     generic        {"query" or "ctx", "choices" or "endings", "gold" or "label"}: the prompt as
//                    it is (hellaswag's processed rows have this form)
//   A gold index or label may be a number or a string of digits.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "eval/task.hpp"

namespace meg {

// The document of OBJ (a JSON object) for task TYPE; InputError prefixed with WHERE ("FILE:LINE")
// naming the missing or malformed field.
EvalDoc parse_doc(const nlohmann::json& obj, TaskType type, const std::string& where);

}  // namespace meg
