// meg-eval's task files: each supported JSONL form gives the prompts lm-evaluation-harness's task
// configs give, bad lines are refused with the file, the line and the field, indexed datasets are
// read as token documents, and few-shot prompts are the ones lm-eval draws (expected strings from
// CPython running lm-eval's sampler with random.Random(1234) over the same documents).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.hpp"
#include "data/indexed_dataset.hpp"
#include "eval/doc_format.hpp"
#include "eval/fewshot.hpp"
#include "eval/task.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

// The document of LINE, with its source as read_task() keeps it.
EvalDoc parse(const char* line, TaskType type) {
  EvalDoc d = parse_doc(nlohmann::json::parse(line), type, "t.jsonl:7");
  d.source = nlohmann::json::parse(line);
  return d;
}

std::string parse_error(const char* line, TaskType type) {
  return input_error_of([&] { parse(line, type); });
}

const std::string kData = std::string(MEG_TEST_DATA) + "/eval/";

}  // namespace

TEST_CASE("eval tasks: task type names", "[eval]") {
  CHECK(parse_task_type("perplexity") == TaskType::perplexity);
  CHECK(parse_task_type("lambada") == TaskType::lambada);
  CHECK(parse_task_type("multiple-choice") == TaskType::multiple_choice);
  CHECK(input_error_of([] { parse_task_type("mmlu"); }) ==
        "--task-type 'mmlu': expected perplexity, lambada or multiple-choice");
}

TEST_CASE("eval tasks: lambada and perplexity lines", "[eval]") {
  auto d = parse(R"({"text": "He left the keys"})", TaskType::lambada);
  CHECK(d.text == "He left the");
  CHECK(d.target == " keys");
  d = parse(R"({"text": "alone"})", TaskType::lambada);
  CHECK(d.text.empty());
  CHECK(d.target == " alone");

  d = parse(R"({"text": "two  words\n"})", TaskType::perplexity);
  CHECK(d.target == "two  words\n");
  CHECK(d.words == 3);  // re.split(r"\s+") of "two  words\n": "two", "words", ""
  CHECK(d.bytes == 11);
  // WikiText: scored detokenized, counted as given.
  d = parse(R"({"page": " = Title = \n 1 @,@ 000 café "})", TaskType::perplexity);
  CHECK(d.target == " = Title =\n1,000 café ");
  CHECK(d.words == 9);
  CHECK(d.bytes == 29);
}

TEST_CASE("eval tasks: the multiple-choice forms", "[eval]") {
  auto d =
      parse(R"({"goal": "Dry shoes", "sol1": "newspaper", "sol2": "water", "label": 1})", TaskType::multiple_choice);
  CHECK(d.text == "Question: Dry shoes\nAnswer:");
  CHECK(d.choices == std::vector<std::string>{"newspaper", "water"});
  CHECK(d.gold == 1);
  CHECK(d.target == "water");

  d = parse(
      R"({"question": "Which?", "choices": {"text": ["x", "y", "z"], "label": ["1", "2", "3"]}, "answerKey": "3"})",
      TaskType::multiple_choice);
  CHECK(d.text == "Question: Which?\nAnswer:");
  CHECK(d.gold == 2);

  d = parse(
      R"({"question_stem": "Ice", "choices": {"text": ["melts", "sings"], "label": ["A", "B"]}, "answerKey": " A"})",
      TaskType::multiple_choice);
  CHECK(d.text == "Ice");  // OpenBookQA: the stem alone, the key's leading space stripped
  CHECK(d.gold == 0);

  d = parse(R"({"query": "Q", "choices": ["a", "b"], "gold": "1"})", TaskType::multiple_choice);
  CHECK(d.text == "Q");
  CHECK(d.gold == 1);
  d = parse(R"({"ctx": "C", "endings": ["a", "b", "c"], "label": 2})", TaskType::multiple_choice);
  CHECK(d.text == "C");
  CHECK(d.choices.size() == 3);
  CHECK(d.gold == 2);
}

TEST_CASE("eval tasks: bad lines name the file, the line and the field", "[eval]") {
  const auto mc = TaskType::multiple_choice;
  CHECK(parse_error(R"({"query": "Q", "choices": ["a"]})", mc) ==
        "t.jsonl:7: no \"gold\" or \"label\" field (see meg-eval(1) for the multiple-choice fields)");
  CHECK(parse_error(R"({"choices": ["a"], "gold": 0})", mc) ==
        "t.jsonl:7: no \"query\" or \"ctx\" field (see meg-eval(1) for the multiple-choice fields)");
  CHECK(parse_error(R"({"goal": "G", "sol1": "a", "label": 0})", mc) ==
        "t.jsonl:7: no \"sol2\" field (a piqa line has \"goal\", \"sol1\", \"sol2\", \"label\")");
  CHECK(parse_error(R"({"query": "Q", "choices": ["a", "b"], "gold": 2})", mc) ==
        "t.jsonl:7: gold 2 is out of range for 2 choices");
  CHECK(parse_error(R"({"query": "Q", "choices": ["a", "b"], "gold": -1})", mc) ==
        "t.jsonl:7: gold -1 is out of range for 2 choices");
  CHECK(parse_error(R"({"query": "Q", "choices": ["a", "b"], "gold": "first"})", mc) ==
        "t.jsonl:7: \"gold\" is \"first\", not a choice number");
  CHECK(parse_error(R"({"query": "Q", "choices": "a b", "gold": 0})", mc) ==
        "t.jsonl:7: \"choices\" is a string, not an array of strings");
  CHECK(parse_error(R"({"query": "Q", "choices": [], "gold": 0})", mc) == "t.jsonl:7: no choices");
  CHECK(parse_error(R"({"question": "Q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"})", mc) ==
        "t.jsonl:7: answerKey \"B\" is not one of the choice labels (A)");
  CHECK(parse_error(R"({"question": "Q", "choices": {"text": ["a", "b"], "label": ["A"]}, "answerKey": "A"})", mc) ==
        "t.jsonl:7: \"choices\" has 2 texts and 1 labels");
  CHECK(parse_error(R"({"txt": "x"})", TaskType::lambada) ==
        "t.jsonl:7: no \"text\" field (a lambada line has \"text\")");
  CHECK(parse_error(R"({"text": 5})", TaskType::perplexity) == "t.jsonl:7: \"text\" is a number, not a string");
  CHECK(parse_error(R"({"title": "x"})", TaskType::perplexity) ==
        "t.jsonl:7: no \"text\" field (a perplexity line has \"text\", or WikiText's \"page\")");
}

TEST_CASE("eval tasks: JSONL files, with blank lines, limits and malformed lines", "[eval]") {
  TempDir dir;
  const std::string path = dir.path("t.jsonl");
  write_file(path, "{\"text\": \"a b\"}\n\n  \n{\"text\": \"c d e\"}\n{\"text\": \"f\"}\n");
  Task t = read_task(path, TaskType::lambada, 0);
  REQUIRE(t.docs.size() == 3);
  CHECK(t.scored == 3);
  CHECK(!t.tokenized);
  CHECK(t.docs[1].line == 4);
  CHECK(t.docs[1].source == nlohmann::json{{"text", "c d e"}});
  CHECK(doc_where(t, t.docs[1]) == path + ":4");
  t = read_task(path, TaskType::lambada, 2);
  CHECK(t.docs.size() == 3);  // all read: few-shot examples come from every document
  CHECK(t.scored == 2);

  write_file(path, "{\"text\": \"a b\"}\n{\"text\": \"a b\",}\n");
  CHECK_THAT(input_error_of([&] { read_task(path, TaskType::lambada, 0); }),
             ContainsSubstring(path + ":2:16: not valid JSON"));
  write_file(path, "[\"text\"]\n");
  CHECK(input_error_of([&] { read_task(path, TaskType::lambada, 0); }) ==
        path + ":1: expected a JSON object, found array");
  write_file(path, "\n");
  CHECK(input_error_of([&] { read_task(path, TaskType::lambada, 0); }) == path + ": no documents");
}

TEST_CASE("eval tasks: the test data's files parse in every form", "[eval]") {
  const Task hellaswag = read_task(kData + "hellaswag.jsonl", TaskType::multiple_choice, 0);
  REQUIRE(hellaswag.docs.size() == 5);
  CHECK(hellaswag.docs[1].text ==
        "Home and Garden: How to water a houseplant. Check the soil first. Push a finger into "
        "the soil. If it is dry");
  CHECK(hellaswag.docs[3].gold == 2);
  for (const char* name : {"arc", "piqa", "openbookqa", "choices"})
    CHECK(read_task(kData + name + ".jsonl", TaskType::multiple_choice, 0).docs.size() >= 3);
  CHECK(read_task(kData + "lambada.jsonl", TaskType::lambada, 0).docs.size() == 8);
  CHECK(read_task(kData + "text.jsonl", TaskType::perplexity, 0).docs.size() == 4);
  CHECK(read_task(kData + "wikitext.jsonl", TaskType::perplexity, 0).docs.size() == 2);
}

TEST_CASE("eval tasks: an indexed dataset prefix is a perplexity task of token documents", "[eval]") {
  const std::string prefix = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm";
  const Task t = read_task(prefix, TaskType::perplexity, 3);
  REQUIRE(t.docs.size() == 3);
  CHECK(t.tokenized);
  CHECK(t.scored == 3);
  const IndexedDataset data(prefix);
  CHECK(t.docs[2].tokens == data.document(2).to_vector());
  CHECK(doc_where(t, t.docs[2]) == prefix + ": document 2");
  CHECK(read_task(prefix, TaskType::perplexity, 0).docs.size() == data.num_documents());
  // Only perplexity reads datasets: for the others the prefix is just a missing file.
  CHECK_THAT(input_error_of([&] { read_task(prefix, TaskType::lambada, 0); }), ContainsSubstring(prefix));
}

TEST_CASE("eval few-shot: the examples lm-eval draws, the scored document left out", "[eval]") {
  // Seven documents, the last an equal copy of the first; two shots each from the same file.
  std::vector<EvalDoc> docs;
  for (int i = 0; i < 7; ++i) {
    const int k = i % 6;
    const nlohmann::json j = {
        {"query", fmt::format("q{}", k)}, {"choices", {fmt::format("a{}", k), fmt::format("b{}", k)}}, {"gold", k % 2}};
    EvalDoc d = parse_doc(j, TaskType::multiple_choice, "f.jsonl");
    d.source = j;
    docs.push_back(d);
  }
  const std::vector<std::string> expected = {"q3 b3\n\n",          "q0 a0\n\nq0 a0\n\n", "q0 a0\n\nq5 b5\n\n",
                                             "q0 a0\n\nq2 a2\n\n", "q0 a0\n\nq0 a0\n\n", "q2 a2\n\nq4 a4\n\n",
                                             "q3 b3\n\nq4 a4\n\n"};
  for (int run = 0; run < 2; ++run) {  // deterministic: the same prompts every time
    FewshotSampler sampler(docs, 2, true, kFewshotSeed, "f.jsonl");
    for (size_t i = 0; i < docs.size(); ++i) CHECK(sampler.examples(docs[i]) == expected[i]);
  }
  FewshotSampler none(docs, 0, true, kFewshotSeed, "f.jsonl");
  CHECK(none.examples(docs[0]).empty());
  // Another seed draws others.
  FewshotSampler other(docs, 2, true, 99, "f.jsonl");
  std::string all;
  for (const EvalDoc& d : docs) all += other.examples(d);
  std::string expected_all;
  for (const auto& e : expected) expected_all += e;
  CHECK(all != expected_all);

  // Lambada examples show text, delimiter and target (whose own leading space lm-eval keeps).
  const EvalDoc l = parse(R"({"text": "the cat sat"})", TaskType::lambada);
  const std::vector<EvalDoc> one = {l};
  FewshotSampler from_other_file(one, 1, false, kFewshotSeed, "train.jsonl");
  CHECK(from_other_file.examples(parse(R"({"text": "a b"})", TaskType::lambada)) == "the cat  sat\n\n");

  CHECK(input_error_of([&] { FewshotSampler(docs, 7, true, kFewshotSeed, "f.jsonl"); }) ==
        "f.jsonl: --num-fewshot 7 draws 8 examples (one more than asked, as the scored document may be drawn), "
        "but the file holds 7 documents");
  CHECK(input_error_of([&] { FewshotSampler(one, 2, false, kFewshotSeed, "train.jsonl"); }) ==
        "train.jsonl: --num-fewshot 2 draws 2 examples, but the file holds 1 documents");
}
