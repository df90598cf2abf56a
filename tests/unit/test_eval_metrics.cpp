// meg-eval's requests, metrics and whole runs: text requests tokenized as lm-evaluation-harness's
// _encode_pair does, acc and acc_norm on a case where they disagree (choice lengths in
// characters, not bytes; ties to the first choice), perplexities from their sums, and a whole
// evaluation whose metrics follow from its per-request results, with its reports.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "catch.hpp"
#include "eval/metrics.hpp"
#include "eval/report.hpp"
#include "eval/requests.hpp"
#include "eval/runner.hpp"
#include "model/gpt.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinRel;

namespace {

const std::string kData = MEG_TEST_DATA;

const Tokenizer& spm() {
  static const auto tok = load_tokenizer(kData + "/megatron/fortunes_spm.model");
  return *tok;
}

std::vector<int32_t> encode(std::string_view text) {
  std::vector<int32_t> ids;
  spm().encode(text, ids);
  return ids;
}

Task task_of(TaskType type, std::vector<EvalDoc> docs) {
  Task t;
  t.path = "t.jsonl";
  t.type = type;
  t.docs = std::move(docs);
  t.scored = t.docs.size();
  return t;
}

EvalDoc choice_doc(std::vector<std::string> choices, int gold) {
  EvalDoc d;
  d.choices = std::move(choices);
  d.gold = gold;
  return d;
}

// A request of document DOC whose continuation is N tokens long.
Request request(size_t doc, size_t n) { return {doc, 0, "", "", {1}, std::vector<int32_t>(n, 2)}; }

double metric(const std::vector<Metric>& ms, const std::string& name) {
  for (const Metric& m : ms)
    if (m.name == name) return m.value;
  FAIL("no metric " << name);
  return 0;
}

CheckpointModel random_checkpoint(int64_t seq_length) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.vocab_size = spm().vocab_size();
  c.seq_length = seq_length;
  c.init_std = 0.3;
  c.pad_vocab();
  GptModel<float> m(c);
  m.init(11);
  CheckpointModel ck;
  ck.path = "random";
  ck.config = c;
  ck.params.assign(m.params(), m.params() + m.num_parameters());
  return ck;
}

}  // namespace

TEST_CASE("eval requests: contexts and continuations tokenized as lm-eval's _encode_pair", "[eval]") {
  Request r{0, 0, "Question: why?\nAnswer: ", "because", {}, {}};
  encode_request(spm(), r);
  // The context's trailing space goes to the continuation; the continuation is what the whole
  // text's tokens hold after as many as the context's.
  CHECK(r.context_tokens == encode("Question: why?\nAnswer:"));
  const std::vector<int32_t> whole = encode("Question: why?\nAnswer: because");
  CHECK(r.continuation_tokens == std::vector<int32_t>(whole.begin() + r.context_tokens.size(), whole.end()));
  CHECK(!r.continuation_tokens.empty());

  Request empty{0, 0, "", " word", {}, {}};
  encode_request(spm(), empty);
  CHECK(empty.context_tokens == std::vector<int32_t>{spm().eod_id()});
  CHECK(empty.continuation_tokens == encode(" word"));
  Request spaces{0, 0, " \n", "word", {}, {}};
  encode_request(spm(), spaces);
  CHECK(spaces.context_tokens == std::vector<int32_t>{spm().eod_id()});
  CHECK(spaces.continuation_tokens == encode(" \nword"));
}

TEST_CASE("eval requests: one per choice, windows for perplexity, and what does not fit", "[eval]") {
  EvalDoc mc = choice_doc({"yes", "no"}, 0);
  mc.text = "Is it?";
  const Task t = task_of(TaskType::multiple_choice, {mc});
  const auto rs = build_requests(t, spm(), nullptr, 32, 2000);
  REQUIRE(rs.size() == 2);
  CHECK(rs[1].doc == 0);
  CHECK(rs[1].index == 1);
  CHECK(rs[1].context == "Is it?");
  CHECK(rs[1].continuation == " no");

  EvalDoc text;
  text.target = "The library at the end of the lane had been closed for years, but every Saturday";
  const Task p = task_of(TaskType::perplexity, {text});
  const auto ws = build_requests(p, spm(), nullptr, 4, 2000);
  const std::vector<int32_t> tokens = encode(text.target);
  REQUIRE(ws.size() == (tokens.size() + 3) / 4);
  CHECK(ws[0].context_tokens == std::vector<int32_t>{spm().eod_id()});
  CHECK(ws[1].index == 1);
  CHECK(ws[1].context.empty());

  EvalDoc long_choice = choice_doc({"a b c d e f g h i j k l m n o p"}, 0);
  long_choice.line = 3;
  CHECK(input_error_of([&] {
          build_requests(task_of(TaskType::multiple_choice, {long_choice}), spm(), nullptr, 8, 2000);
        }) == "t.jsonl:3: choice 0 is 17 tokens, more than the model's context of 8");
  EvalDoc bad;
  bad.tokens = {5, 2000, 7};
  Task data = task_of(TaskType::perplexity, {bad});
  data.tokenized = true;
  CHECK(input_error_of([&] { build_requests(data, spm(), nullptr, 8, 2000); }) ==
        "t.jsonl: document 0: token 2000 at position 1 is outside the model's vocabulary of 2000");
}

TEST_CASE("eval metrics: acc and acc_norm where they disagree", "[eval]") {
  // Doc 0: the short choice is likelier, the long one likelier per character (gold). Doc 1: per
  // character by code points ("éé" is 2 of them, 4 bytes) the gold "abc" wins; by bytes it would
  // not. Doc 2: a tie goes to the first choice, the gold one.
  const Task t = task_of(TaskType::multiple_choice, {choice_doc({"a", "bbbbbbbbbb"}, 1), choice_doc({"éé", "abc"}, 1),
                                                     choice_doc({"x", "y", "z"}, 0)});
  const std::vector<Request> rs = {request(0, 1), request(0, 1), request(1, 1), request(1, 1),
                                   request(2, 1), request(2, 1), request(2, 1)};
  const std::vector<RequestScore> scores = {{-2, false}, {-5, false}, {-2.1, false}, {-3, false},
                                            {-1, true},  {-3, false}, {-1, false}};
  const auto m = compute_metrics(t, rs, scores);
  REQUIRE(m.size() == 2);
  CHECK(m[0].name == "acc");
  CHECK_THAT(m[0].value, WithinRel(1.0 / 3, 1e-12));
  CHECK_THAT(*m[0].standard_error, WithinRel(1.0 / 3, 1e-12));  // sqrt((1/9 + 1/9 + 4/9) / 2) / sqrt(3)
  CHECK(m[1].name == "acc_norm");
  CHECK(m[1].value == 1);
  CHECK(*m[1].standard_error == 0);
  // One document has no standard error.
  const auto one = compute_metrics(task_of(TaskType::multiple_choice, {choice_doc({"a", "b"}, 0)}),
                                   std::vector<Request>{request(0, 1), request(0, 1)},
                                   std::vector<RequestScore>{{-1, true}, {-2, false}});
  CHECK(!one[0].standard_error);
}

TEST_CASE("eval metrics: lambada's acc and perplexity, perplexity's per word, byte and token", "[eval]") {
  const auto l = compute_metrics(task_of(TaskType::lambada, {EvalDoc{}, EvalDoc{}, EvalDoc{}}),
                                 std::vector<Request>{request(0, 2), request(1, 1), request(2, 3)},
                                 std::vector<RequestScore>{{-1, true}, {-2, false}, {-3, true}});
  CHECK_THAT(metric(l, "acc"), WithinRel(2.0 / 3, 1e-12));
  CHECK_THAT(metric(l, "perplexity"), WithinRel(std::exp(2.0), 1e-12));

  EvalDoc a, b;
  a.words = 3, a.bytes = 10, b.words = 2, b.bytes = 5;
  Task t = task_of(TaskType::perplexity, {a, b});
  const std::vector<Request> rs = {request(0, 4), request(0, 2), request(1, 3)};
  const std::vector<RequestScore> scores = {{-3, false}, {-4, false}, {-5, false}};
  const auto p = compute_metrics(t, rs, scores);
  CHECK_THAT(metric(p, "word_perplexity"), WithinRel(std::exp(12.0 / 5), 1e-12));
  CHECK_THAT(metric(p, "byte_perplexity"), WithinRel(std::exp(12.0 / 15), 1e-12));
  CHECK_THAT(metric(p, "bits_per_byte"), WithinRel(12.0 / 15 / std::numbers::ln2, 1e-12));
  CHECK_THAT(metric(p, "token_perplexity"), WithinRel(std::exp(12.0 / 9), 1e-12));
  t.tokenized = true;  // an indexed dataset has no text: tokens only
  const auto q = compute_metrics(t, rs, scores);
  REQUIRE(q.size() == 1);
  CHECK(q[0].name == "token_perplexity");
}

TEST_CASE("eval runs: options checked before anything is read", "[eval]") {
  EvalOptions o;
  o.task = kData + "/eval/text.jsonl";
  o.num_fewshot = 2;
  CHECK(input_error_of([&] { prepare_evaluation(o); }) ==
        "--num-fewshot 2: perplexity scores whole documents, without examples");
  o.type = TaskType::lambada;
  o.num_fewshot = -1;
  CHECK(input_error_of([&] { prepare_evaluation(o); }) == "--num-fewshot must not be negative, got -1");
  o.num_fewshot = 0;
  o.fewshot_file = o.task;
  CHECK_THAT(input_error_of([&] { prepare_evaluation(o); }), ContainsSubstring("needs --num-fewshot above 0"));
  o.fewshot_file.clear();
  o.limit = -1;
  CHECK(input_error_of([&] { prepare_evaluation(o); }) == "--limit must not be negative, got -1");
  o.limit = 0;
  o.batch = 0;
  CHECK(input_error_of([&] { prepare_evaluation(o); }) == "--batch must be at least 1, got 0");
}

TEST_CASE("eval runs: metrics follow from the per-request results; reports", "[eval]") {
  const CheckpointModel ck = random_checkpoint(32);
  const auto scorer = make_scorer(ck, "cpu", Precision::fp32, 4);
  TempDir dir;

  EvalOptions o;
  o.task = kData + "/eval/lambada.jsonl";
  o.type = TaskType::lambada;
  o.num_fewshot = 2;
  o.limit = 5;
  Evaluation e = prepare_evaluation(o);
  run_evaluation(e, *scorer, spm());
  REQUIRE(e.requests.size() == 5);
  double ll = 0, greedy = 0;
  for (size_t i = 0; i < e.requests.size(); ++i) {
    const Request& r = e.requests[i];
    CHECK(r.doc == i);
    // Two examples, then the document's own context.
    CHECK(r.context.ends_with("\n\n" + e.task.docs[i].text));
    CHECK(std::count(r.context.begin(), r.context.end(), '\n') == 4);
    ll += e.scores[i].loglikelihood;
    greedy += e.scores[i].greedy ? 1 : 0;
  }
  CHECK_THAT(metric(e.metrics, "acc"), WithinRel(greedy / 5, 1e-12));
  CHECK_THAT(metric(e.metrics, "perplexity"), WithinRel(std::exp(-ll / 5), 1e-12));

  const RunInfo run{ck.path, ck.config, spm().describe(), "cpu", "fp32", 32};
  const auto j = results_json(e, run);
  CHECK(j["task_type"] == "lambada");
  CHECK(j["num_fewshot"] == 2);
  CHECK(j["fewshot_seed"] == kFewshotSeed);
  CHECK(j["documents"] == 5);
  CHECK(j["requests"] == 5);
  CHECK(j["metrics"]["acc"] == metric(e.metrics, "acc"));
  CHECK(j["metrics"].contains("acc_stderr"));
  CHECK(j["model"]["max_length"] == 32);
  CHECK_THAT(results_table(e), ContainsSubstring("|lambada.jsonl|lambada|     2|        5|acc "));

  write_per_example(dir.path("per.jsonl"), e);
  const std::string per = read_file(dir.path("per.jsonl"));
  CHECK(std::count(per.begin(), per.end(), '\n') == 5);
  const auto first = nlohmann::json::parse(per.substr(0, per.find('\n')));
  CHECK(first["doc"] == 0);
  CHECK(first["line"] == 1);
  CHECK(first["context_tokens"] == e.requests[0].context_tokens);
  CHECK(first["continuation"] == e.requests[0].continuation);
  CHECK(first["loglikelihood"] == e.scores[0].loglikelihood);
  CHECK(first["is_greedy"] == e.scores[0].greedy);

  // Perplexity over text: documents longer than the model's 32 tokens are scored in windows.
  o = EvalOptions{};
  o.task = kData + "/eval/text.jsonl";
  e = prepare_evaluation(o);
  run_evaluation(e, *scorer, spm());
  CHECK(e.requests.size() > e.task.docs.size());
  double sum = 0;
  uint64_t tokens = 0;
  for (size_t i = 0; i < e.requests.size(); ++i) {
    sum += e.scores[i].loglikelihood;
    tokens += e.requests[i].continuation_tokens.size();
  }
  uint64_t expected_tokens = 0;
  for (const EvalDoc& d : e.task.docs) expected_tokens += encode(d.target).size();
  CHECK(tokens == expected_tokens);
  CHECK_THAT(metric(e.metrics, "token_perplexity"), WithinRel(std::exp(-sum / double(tokens)), 1e-12));
}
