// The generator: the end-of-document token, max tokens and a full slot end a sequence; stop
// strings cut the completion and never reach the stream; continuous batching refills a finished
// sequence's slot at the next call; the completions are the same with 1 slot or 3 (greedy and
// sampled, on the real CPU model).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"
#include "infer/cpu_inference_model.hpp"
#include "infer/generator.hpp"
#include "model/gpt.hpp"

using namespace meg;

namespace {

const std::string kSpm = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm.model";

// A model that answers every token with the one its table says comes next (the end-of-document
// token after any other), and records the calls it gets: (slot, tokens) per request.
class ScriptModel final : public InferenceModel {
 public:
  ScriptModel(int vocab, int slots, int max_length, std::map<int32_t, int32_t> next, int32_t otherwise)
      : slots_(slots), max_length_(max_length), lengths_(size_t(slots), 0), next_(std::move(next)),
        otherwise_(otherwise) {
    config_.vocab_size = vocab;
  }
  const ModelConfig& config() const override { return config_; }
  int slots() const override { return slots_; }
  int max_length() const override { return max_length_; }
  int length(int slot) const override { return lengths_[size_t(slot)]; }
  void reset(int slot) override { lengths_[size_t(slot)] = 0; }
  void append(std::span<const AppendRequest> requests, float* logits) override {
    std::vector<std::pair<int, size_t>> call;
    for (size_t i = 0; i < requests.size(); ++i) {
      const AppendRequest& r = requests[i];
      lengths_[size_t(r.slot)] += int(r.tokens.size());
      REQUIRE(lengths_[size_t(r.slot)] <= max_length_);
      const auto it = next_.find(r.tokens.back());
      float* row = logits + i * size_t(config_.vocab_size);
      std::fill(row, row + config_.vocab_size, 0.0f);
      row[it == next_.end() ? otherwise_ : it->second] = 10.0f;
      if (loud_last_token) row[config_.vocab_size - 1] = 20.0f;
      call.emplace_back(r.slot, r.tokens.size());
    }
    calls.push_back(call);
  }
  std::vector<std::vector<std::pair<int, size_t>>> calls;
  bool loud_last_token = false;  // the vocabulary's last token has the largest logit of every row

 private:
  ModelConfig config_;
  int slots_, max_length_;
  std::vector<int> lengths_;
  std::map<int32_t, int32_t> next_;
  int32_t otherwise_;
};

// The tokens of a sentence with no repeated token, and the script that continues it.
struct Script {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(kSpm);
  std::vector<int32_t> ids;
  std::map<int32_t, int32_t> next;
  explicit Script(const std::string& sentence) {
    tok->encode(sentence, ids);
    for (size_t i = 0; i + 1 < ids.size(); ++i) REQUIRE(next.emplace(ids[i], ids[i + 1]).second);
  }
  std::vector<int32_t> prompt(size_t n) const { return {ids.begin(), ids.begin() + ptrdiff_t(n)}; }
  // The text the completion of a prompt of N tokens has when it runs to token END.
  std::string text(size_t n, size_t end) const {
    return tok->decode({ids.data(), end}).substr(tok->decode({ids.data(), n}).size());
  }
};

GenerationRequest request(std::vector<int32_t> prompt, int max_tokens, std::vector<std::string> stop = {}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  return r;
}

// Collects the streamed text and the completions.
struct Recorder final : CompletionSink {
  std::map<size_t, std::string> streamed;
  std::map<size_t, Completion> done_;
  std::vector<size_t> order;
  void text(size_t id, std::string_view t) override {
    REQUIRE(done_.count(id) == 0);
    streamed[id] += t;
  }
  void done(size_t id, Completion c) override {
    done_[id] = std::move(c);
    order.push_back(id);
  }
};

Recorder run(InferenceModel& model, const Tokenizer& tok, std::vector<GenerationRequest> requests) {
  Recorder rec;
  ListSource source(std::move(requests));
  Generator(model, tok).run(source, rec);
  return rec;
}

const std::string kSentence = "A quick brown fox jumps over my lazy dog.";

}  // namespace

TEST_CASE("generator: the end-of-document token, max tokens and a full slot end a sequence", "[infer][generator]") {
  const Script s(kSentence);
  const int32_t eod = s.tok->eod_id();
  const size_t n = s.ids.size();
  REQUIRE(n > 6);
  ScriptModel model(s.tok->vocab_size(), 1, 64, s.next, eod);

  Recorder r = run(model, *s.tok, {request(s.prompt(2), 50)});
  CHECK(r.done_[0].finish == FinishReason::eod);
  CHECK(r.done_[0].ids == std::vector<int32_t>(s.ids.begin() + 2, s.ids.end()));  // the eod token not among them
  CHECK(r.done_[0].text == s.text(2, n));
  CHECK(r.streamed[0] == r.done_[0].text);

  r = run(model, *s.tok, {request(s.prompt(2), 3)});
  CHECK(r.done_[0].finish == FinishReason::length);
  CHECK(r.done_[0].ids == std::vector<int32_t>(s.ids.begin() + 2, s.ids.begin() + 5));
  CHECK(r.done_[0].text == s.text(2, 5));

  // A slot of 4 tokens: the prompt's 2, then room for 2 of the 3 tokens generated (the last one
  // is never run).
  ScriptModel short_model(s.tok->vocab_size(), 1, 4, s.next, eod);
  r = run(short_model, *s.tok, {request(s.prompt(2), 50)});
  CHECK(r.done_[0].finish == FinishReason::length);
  CHECK(r.done_[0].ids.size() == 3);
  CHECK(input_error_of([&] { run(short_model, *s.tok, {request(s.prompt(5), 5)}); }) ==
        "generate: a prompt of 5 tokens exceeds the model's length of 4");
}

TEST_CASE("generator: only the tokenizer's tokens are chosen, greedy or sampled", "[infer][generator]") {
  // The model's vocabulary has 8 tokens more than the tokenizer's, the last of them every row's
  // largest logit: greedy choices (made by InferenceModel::append_greedy) and sampled ones alike
  // must keep to the tokenizer's, where the script's token is the largest.
  const Script s(kSentence);
  const int32_t eod = s.tok->eod_id();
  ScriptModel model(s.tok->vocab_size() + 8, 1, 64, s.next, eod);
  model.loud_last_token = true;
  for (const double temperature : {0.0, 0.05}) {
    INFO("temperature " << temperature);
    GenerationRequest r = request(s.prompt(2), 50);
    r.sampling.temperature = temperature;
    const Recorder rec = run(model, *s.tok, {r});
    CHECK(rec.done_.at(0).finish == FinishReason::eod);
    CHECK(rec.done_.at(0).ids == std::vector<int32_t>(s.ids.begin() + 2, s.ids.end()));
  }
}

TEST_CASE("generator: a stop string cuts the completion and never reaches the stream", "[infer][generator]") {
  const Script s(kSentence);
  const size_t n = s.ids.size();
  ScriptModel model(s.tok->vocab_size(), 1, 64, s.next, s.tok->eod_id());
  REQUIRE(s.tok->decode(s.prompt(3)) == "A quick");
  const std::string full = s.text(3, n);
  REQUIRE(full == " brown fox jumps over my lazy dog.");
  auto stop_at = [&](std::vector<std::string> stop) {
    Recorder r = run(model, *s.tok, {request(s.prompt(3), 50, std::move(stop))});
    CHECK(r.streamed[0] == r.done_[0].text);
    return r.done_[0];
  };
  Completion c = stop_at({" over"});
  CHECK(c.finish == FinishReason::stop);
  CHECK(c.text == " brown fox jumps");
  // The ids are every token generated, those spelling the stop string included.
  CHECK(s.tok->decode(c.ids).find("over") != std::string::npos);
  CHECK(stop_at({"mps ov"}).text == " brown fox ju");    // within and across tokens
  CHECK(stop_at({"lazy", "fox"}).text == " brown ");      // the earliest of several
  CHECK(stop_at({" brown"}).text.empty());                // at the very start
  c = stop_at({"dog.!", "xyz"});  // a beginning held back, then released at the end
  CHECK(c.finish == FinishReason::eod);
  CHECK(c.text == full);
}

TEST_CASE("generator: continuous batching refills a finished sequence's slot at the next call",
          "[infer][generator]") {
  const Script s(kSentence);
  ScriptModel model(s.tok->vocab_size(), 2, 64, s.next, s.tok->eod_id());
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(s.prompt(3), 1));   // done after its prompt
  reqs.push_back(request(s.prompt(2), 4));   // four tokens
  reqs.push_back(request(s.prompt(1), 2));   // takes request 0's slot at once
  Recorder r = run(model, *s.tok, std::move(reqs));
  using Call = std::vector<std::pair<int, size_t>>;
  REQUIRE(model.calls.size() == 4);
  CHECK(model.calls[0] == Call{{0, 3}, {1, 2}});  // two prompts
  CHECK(model.calls[1] == Call{{0, 1}, {1, 1}});  // slot 0: request 2's prompt; slot 1 decodes
  CHECK(model.calls[2] == Call{{0, 1}, {1, 1}});
  CHECK(model.calls[3] == Call{{1, 1}});          // request 2 is done
  CHECK(r.order == std::vector<size_t>{0, 2, 1});
  CHECK(r.done_[2].ids == std::vector<int32_t>(s.ids.begin() + 1, s.ids.begin() + 3));
}

TEST_CASE("generator: completions do not depend on the number of slots", "[infer][generator]") {
  const auto tok = load_tokenizer(kSpm);
  ModelConfig c = ModelConfig::preset("tiny-llama");
  c.set_vocab_from_tokenizer(tok->vocab_size());
  c.seq_length = 32;
  c.init_std = 0.2;  // far from uniform, so that greedy and sampled runs differ
  c.validate();
  std::vector<float> params(size_t(c.num_parameters()));
  gpt_init_parameters(c, gpt_parameter_table(c), 5, params.data());

  std::vector<GenerationRequest> reqs;
  const std::vector<std::string> prompts = {"The cat", "Life is a series", "", "A", "People who take cat naps"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = request({}, 6 + int(i) * 3);
    tok->encode(prompts[i], r.prompt);
    if (r.prompt.empty()) r.prompt.push_back(tok->eod_id());
    r.sampling.seed = 17;
    if (i % 2 == 1) r.sampling.temperature = 0.9;
    if (i == 3) r.sampling.top_k = 20;
    if (i == 4) {
      r.sampling.top_p = 0.8;
      r.sampling.repetition_penalty = 1.3;
      r.stop = {"e"};
    }
    reqs.push_back(std::move(r));
  }
  CpuInferenceModel one(c, params, 1, 0), three(c, params, 3, 0);
  const std::vector<Completion> a = generate(one, *tok, reqs);
  const std::vector<Completion> b = generate(three, *tok, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    CHECK(a[i].ids == b[i].ids);
    CHECK(a[i].text == b[i].text);
    CHECK(a[i].finish == b[i].finish);
    CHECK(!a[i].ids.empty());
  }
  // Another seed changes the sampled requests only.
  for (auto& r : reqs) r.sampling.seed = 18;
  const std::vector<Completion> d = generate(three, *tok, reqs);
  CHECK(d[0].ids == a[0].ids);
  CHECK(d[2].ids == a[2].ids);
  CHECK((d[1].ids != a[1].ids || d[3].ids != a[3].ids));
}

namespace {

// MODEL, reporting that it overlaps the host, so that the generator queues steps ahead on it
// (InferenceModel's own queue: each call made at once, and what the queue forbids refused); counts
// the chained calls.
class Overlapping final : public InferenceModel {
 public:
  explicit Overlapping(InferenceModel& model) : model_(model) {}
  const ModelConfig& config() const override { return model_.config(); }
  int slots() const override { return model_.slots(); }
  int max_length() const override { return model_.max_length(); }
  int length(int slot) const override { return model_.length(slot); }
  void reset(int slot) override {
    default_queue_reset();
    model_.reset(slot);
  }
  void append(std::span<const AppendRequest> requests, float* logits) override {
    default_queue_append();  // so that the generator is held to the queue's contract
    model_.append(requests, logits);
  }
  bool overlaps() const override { return true; }
  void queue_choices(std::span<const AppendRequest> requests, int choices, std::span<const SoftmaxDraw> draws,
                     bool chained) override {
    chained_calls += chained;
    InferenceModel::queue_choices(requests, choices, draws, chained);
  }
  int chained_calls = 0;

 private:
  InferenceModel& model_;
};

// The requests of a list, one at a time: next(false) gives one only every third time it is asked.
class Trickle final : public RequestSource {
 public:
  explicit Trickle(std::vector<GenerationRequest> requests) : list_(std::move(requests)) {}
  std::optional<GenerationRequest> next(bool wait) override {
    if (!wait && ++asked_ % 3 != 0) return std::nullopt;
    return list_.next(wait);
  }

 private:
  ListSource list_;
  int asked_ = 0;
};

}  // namespace

TEST_CASE("generator: steps queued ahead end sequences as steps taken one at a time", "[infer][generator]") {
  // The script ends at the end-of-document token: the step queued after the one that chose it
  // is computed for nothing, and only that one; max tokens and the slot's end are foreseen.
  const Script s(kSentence);
  const int32_t eod = s.tok->eod_id();
  const size_t n = s.ids.size();
  for (const int max_tokens : {50, 4}) {
    for (const int max_length : {64, 6}) {
      INFO("max tokens " << max_tokens << ", slot of " << max_length);
      ScriptModel plain(s.tok->vocab_size(), 1, max_length, s.next, eod);
      ScriptModel script(s.tok->vocab_size(), 1, max_length, s.next, eod);
      Overlapping ahead(script);
      for (const std::vector<std::string>& stop : {std::vector<std::string>{}, {" over"}}) {
        plain.calls.clear();
        script.calls.clear();
        const Recorder a = run(plain, *s.tok, {request(s.prompt(2), max_tokens, stop)});
        const Recorder b = run(ahead, *s.tok, {request(s.prompt(2), max_tokens, stop)});
        CHECK(b.done_.at(0).ids == a.done_.at(0).ids);
        CHECK(b.done_.at(0).text == a.done_.at(0).text);
        CHECK(b.done_.at(0).finish == a.done_.at(0).finish);
        CHECK(b.streamed.at(0) == a.streamed.at(0));
        const bool unforeseen = a.done_.at(0).finish != FinishReason::length;
        CHECK(script.calls.size() == plain.calls.size() + (unforeseen ? 1 : 0));
      }
    }
  }
  CHECK(n > 6);
}

TEST_CASE("generator: steps queued ahead give the completions of steps taken one at a time", "[infer][generator]") {
  const auto tok = load_tokenizer(kSpm);
  ModelConfig c = ModelConfig::preset("tiny-llama");
  c.set_vocab_from_tokenizer(tok->vocab_size());
  c.seq_length = 24;  // some sequences run to their slot's end
  c.init_std = 0.2;
  c.validate();
  std::vector<float> params(size_t(c.num_parameters()));
  gpt_init_parameters(c, gpt_parameter_table(c), 5, params.data());
  // Every row chosen by the model (greedy, or drawn at a temperature or top-p): the steps chain.
  std::vector<GenerationRequest> reqs;
  const std::vector<std::string> prompts = {"The cat", "Life is a series", "A", "People who take cat naps", "Why",
                                            "It is"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = request({}, 3 + int(i) * 4);
    tok->encode(prompts[i], r.prompt);
    r.sampling.seed = 23;
    if (i % 2 == 1) r.sampling.temperature = 0.9;
    if (i == 3) r.sampling.top_p = 0.8;
    if (i == 4) r.stop = {"e"};
    reqs.push_back(std::move(r));
  }
  for (const int slots : {1, 3}) {
    for (const bool all_greedy : {false, true}) {
      INFO(slots << " slots" << (all_greedy ? ", greedy" : ""));
      std::vector<GenerationRequest> these = reqs;
      if (all_greedy)
        for (auto& r : these) r.sampling = {};
      CpuInferenceModel plain(c, params, slots, 0), inner(c, params, slots, 0);
      Overlapping ahead(inner);
      Recorder a;
      ListSource list(these);
      Generator(plain, *tok).run(list, a);
      Recorder b;
      Trickle trickle(these);
      Generator(ahead, *tok).run(trickle, b);
      CHECK(ahead.chained_calls > 0);
      REQUIRE(b.done_.size() == these.size());
      for (size_t i = 0; i < these.size(); ++i) {
        INFO("request " << i);
        CHECK(b.done_.at(i).ids == a.done_.at(i).ids);
        CHECK(b.done_.at(i).text == a.done_.at(i).text);
        CHECK(b.done_.at(i).finish == a.done_.at(i).finish);
        CHECK(b.streamed.at(i) == a.streamed.at(i));
      }
    }
  }
}
