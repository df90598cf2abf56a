// Generator: continuous batching, stop conditions and streaming text.
#include "infer/generator.hpp"

#include <algorithm>
#include <span>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "infer/text_stream.hpp"

namespace meg {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::eod: return "eod";
  }
  return "?";
}

namespace {

// What the model hands over after a step, for rows that choose among CHOICES tokens as ROWS say.
// A penalty counts only where the model applies it (PENALISED: InferenceModel::penalises()); else
// a penalised row needs all its logits.
enum class Handover {
  argmax,            // every row greedy: its argmax (append_greedy)
  draws,             // every row that or a draw from the softmax of all its logits: its token (append_sample)
  draws_and_logits,  // some rows that draw so, some that need all the logits: both (append_sample)
  top_k,             // every row greedy or top-k (k <= kMaxAppendTopK): the K largest (append_top_k)
  logits,            // otherwise: all the logits (append)
};

Handover handover(std::span<const SamplingParams* const> rows, int choices, bool penalised) {
  bool argmax = true, all_drawn = true, any_drawn = false, few = true;
  for (const SamplingParams* p : rows) {
    if (p->argmax_of_logits(penalised)) continue;
    argmax = false;
    all_drawn = all_drawn && p->softmax_of_logits(choices, penalised);
    any_drawn = any_drawn || p->softmax_of_logits(choices, penalised);
    few = few && p->top_k_of_logits(choices, penalised) && p->top_k <= kMaxAppendTopK;
  }
  if (argmax) return Handover::argmax;
  if (any_drawn) return all_drawn ? Handover::draws : Handover::draws_and_logits;
  return few ? Handover::top_k : Handover::logits;
}

}  // namespace

// A request in a slot.
struct Generator::Sequence {
  Sequence(size_t id, GenerationRequest r, const Tokenizer& tokenizer)
      : id(id), request(std::move(r)), history(request.prompt), stream(tokenizer, request.prompt) {}

  size_t id;
  GenerationRequest request;
  std::vector<int32_t> history;  // prompt and completion, for the repetition penalty
  TextStream stream;
  std::string text;              // the completion's text so far
  size_t released = 0;           // bytes of text given to the sink
  Completion completion;
  bool prefilled = false;        // the prompt is in the cache

  // Where the first stop string in the text begins, or npos. Released text holds no beginning
  // of one (release() holds such text back), so the search starts there.
  size_t stop_position() const {
    size_t at = std::string::npos;
    for (const std::string& s : request.stop) at = std::min(at, text.find(s, released));
    return at;
  }

  // Bytes at the end of the unreleased text that begin a stop string.
  size_t held_back() const {
    size_t held = 0;
    const std::string_view unreleased = std::string_view(text).substr(released);
    for (const std::string& s : request.stop)
      for (size_t k = std::min(s.size() - 1, unreleased.size()); k > held; --k)
        if (unreleased.ends_with(std::string_view(s).substr(0, k))) {
          held = k;
          break;
        }
    return held;
  }
};

Generator::Generator(InferenceModel& model, const Tokenizer& tokenizer)
    : model_(model), tokenizer_(tokenizer), samplers_(size_t(model.slots()), Sampler(tokenizer.vocab_size())) {
  if (tokenizer.vocab_size() > model.config().vocab_size)
    input_error("the tokenizer's {} tokens do not fit the model's vocabulary of {}", tokenizer.vocab_size(),
                model.config().vocab_size);
}

void Generator::check(const GenerationRequest& r) const {
  if (r.prompt.empty()) input_error("generate: a request has an empty prompt");
  if (r.prompt.size() > size_t(model_.max_length()))
    input_error("generate: a prompt of {} tokens exceeds the model's length of {}", r.prompt.size(),
                model_.max_length());
  for (const int32_t t : r.prompt)
    if (t < 0 || t >= tokenizer_.vocab_size())
      input_error("generate: prompt token {} outside the tokenizer's vocabulary [0, {})", t, tokenizer_.vocab_size());
  if (r.max_tokens < 1) input_error("generate: max tokens {} must be at least 1", r.max_tokens);
  r.sampling.validate("generate");
  for (const std::string& s : r.stop)
    if (s.empty()) input_error("generate: a stop string is empty");
}

void Generator::release(Sequence& s, size_t end, CompletionSink& sink) {
  if (end <= s.released) return;
  sink.text(s.id, std::string_view(s.text).substr(s.released, end - s.released));
  s.released = end;
}

bool Generator::advance(Sequence& s, int32_t token, int slot, CompletionSink& sink) {
  std::optional<FinishReason> finish;
  if (token == tokenizer_.eod_id()) {
    finish = FinishReason::eod;
  } else {
    s.completion.ids.push_back(token);
    s.history.push_back(token);
    s.text += s.stream.push(token);
    // A full slot cannot take the token back in to go on.
    if (s.completion.ids.size() >= size_t(s.request.max_tokens) || model_.length(slot) >= model_.max_length())
      finish = FinishReason::length;
  }
  if (finish) s.text += s.stream.finish();
  if (const size_t at = s.stop_position(); at != std::string::npos) {
    s.text.resize(at);
    finish = FinishReason::stop;
  }
  if (!finish) {
    release(s, s.text.size() - s.held_back(), sink);
    return false;
  }
  release(s, s.text.size(), sink);
  s.completion.text = std::move(s.text);
  s.completion.finish = *finish;
  sink.done(s.id, std::move(s.completion));
  return true;
}

GenerationStats Generator::run(RequestSource& source, CompletionSink& sink) {
  const int slots = model_.slots();
  const size_t V = size_t(model_.config().vocab_size);
  std::vector<std::optional<Sequence>> running(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) model_.reset(i);
  std::vector<AppendRequest> appends, ahead;
  std::vector<int32_t> last_token(static_cast<size_t>(slots)), chosen(static_cast<size_t>(slots)), top_tokens;
  std::vector<float> top_logits;
  std::vector<SoftmaxDraw> draws;
  std::vector<const SamplingParams*> rows;
  const std::span<float> logits = model_.logits_buffer();
  const int choices = tokenizer_.vocab_size();
  const bool penalised = model_.penalises();
  GenerationStats stats;
  size_t active = 0;
  std::optional<GenerationRequest> early;  // taken from the source while a step was queued
  bool queued = false;                     // appends' step is queued (queue_choices), its tokens not taken
  Handover h = Handover::logits;

  // The uniform number of S's draw STEPS tokens after its completion so far.
  const auto uniform = [&](const Sequence& s, size_t steps) {
    const SamplingParams& p = s.request.sampling;
    return p.greedy() ? 0.0 : sampling_uniform(p.seed, s.id, s.completion.ids.size() + steps);
  };
  const auto drawn = [&](const SamplingParams& p) {
    return p.softmax_of_logits(choices, penalised) || (h == Handover::draws && p.argmax_of_logits(penalised));
  };
  // Whether the model hands over the row's token itself.
  const auto chosen_there = [&](const SamplingParams& p) {
    return h == Handover::argmax || ((h == Handover::draws || h == Handover::draws_and_logits) && drawn(p));
  };
  // The model's draws (append_sample's) of STEP's rows, STEPS tokens after their completions so far.
  const auto draws_of = [&](std::span<const AppendRequest> step, size_t steps) {
    draws.clear();
    for (const AppendRequest& a : step) {
      const Sequence& s = *running[size_t(a.slot)];
      const SamplingParams& p = s.request.sampling;
      draws.push_back(drawn(p) ? SoftmaxDraw{p.temperature, p.top_p, uniform(s, steps)} : SoftmaxDraw{0, 1, 0});
    }
  };
  // Queues STEP (its rows' argmaxes, or their draws): CHAINED, the step after the queued one, whose
  // tokens are not yet taken, so its draws are one token further on.
  const auto queue = [&](std::span<const AppendRequest> step, bool chained) {
    if (h == Handover::draws) draws_of(step, chained ? 1 : 0);
    model_.queue_choices(step, choices,
                         h == Handover::draws ? std::span<const SoftmaxDraw>(draws) : std::span<const SoftmaxDraw>(),
                         chained);
  };
  // Whether the step after appends' (its rows' next tokens, chained on the device) is sure to be
  // wanted, whatever appends' tokens are: every row still running and short of its max_tokens and
  // of the slot's end, and no request waiting for a free slot. Only the end-of-document token or a
  // stop string can then end a row, which costs the row's step ahead and nothing else.
  const auto certain_ahead = [&] {
    if (!queued || !model_.overlaps()) return false;
    for (size_t k = 0; k < appends.size(); ++k) {
      const auto& s = running[size_t(appends[k].slot)];
      if (!s) return false;
      if (s->completion.ids.size() + 1 >= size_t(s->request.max_tokens)) return false;
      if (model_.length(appends[k].slot) + 1 >= model_.max_length()) return false;
    }
    if (active < size_t(slots) && !early) early = source.next(false);
    return !early;
  };

  for (;;) {
    if (!queued) {
      // Free slots take new requests; the source is waited on only when nothing else would run.
      for (int i = 0; i < slots; ++i) {
        if (running[size_t(i)]) continue;
        std::optional<GenerationRequest> r = early ? std::move(early) : source.next(active == 0);
        early.reset();
        if (!r) break;
        check(*r);
        stats.prompt_tokens += r->prompt.size();
        running[size_t(i)].emplace(stats.requests++, std::move(*r), tokenizer_);
        ++active;
      }
      if (active == 0) return stats;

      // One call: the prompts of new sequences, the last token of the others.
      appends.clear();
      for (int i = 0; i < slots; ++i) {
        if (!running[size_t(i)]) continue;
        Sequence& s = *running[size_t(i)];
        appends.push_back({i, s.prefilled ? std::span<const int32_t>(&last_token[size_t(i)], 1)
                                          : std::span<const int32_t>(s.request.prompt)});
        s.prefilled = true;
      }
      // The model hands over no more of the logits than the rows' choices need (handover()). A
      // row that draws from the softmax of all the logits always takes the model's draw, so that
      // it is drawn alike whatever shares its step; the other rows' tokens are chosen here, each on
      // its own (a sampler a slot, the draw from the request's own numbers), the rows in parallel,
      // and the sequences take them in order.
      rows.clear();
      int top_k = 1;
      for (const AppendRequest& a : appends) {
        rows.push_back(&running[size_t(a.slot)]->request.sampling);
        top_k = std::max(top_k, rows.back()->top_k);
      }
      h = handover(rows, choices, penalised);
      // The model applies a row's penalty where it makes the row's choice, or selects its top k; a
      // row chosen here from all its logits gets them unpenalised, and the sampler applies it.
      for (AppendRequest& a : appends) {
        const SamplingParams& p = running[size_t(a.slot)]->request.sampling;
        const bool there = chosen_there(p) || h == Handover::top_k;
        a.repetition_penalty = penalised && there ? p.repetition_penalty : 1;
      }
      // Every token chosen by the model: the call is queued, and the next may follow it before
      // this one's tokens are seen (below).
      if (h == Handover::argmax || h == Handover::draws) {
        queue(appends, false);
        queued = true;
      } else if (h == Handover::draws_and_logits) {
        draws_of(appends, 0);
        model_.append_sample(appends, choices, draws, chosen.data(), logits.data());
      } else if (h == Handover::top_k) {
        top_tokens.resize(appends.size() * size_t(top_k));
        top_logits.resize(appends.size() * size_t(top_k));
        model_.append_top_k(appends, choices, top_k, top_tokens.data(), top_logits.data());
      } else {
        model_.append(appends, logits.data());
      }
      if (!queued) {
        // A row sampled here from all its logits takes tens to hundreds of microseconds, so such
        // rows are sampled in parallel; any other row's choice (a token the model chose, or a draw
        // among at most kMaxAppendTopK candidates) takes about one, less than waking the pool's
        // threads, so those run on this thread alone.
        const bool sampled_here = h == Handover::logits || h == Handover::draws_and_logits;
        parallel_for(appends.size(), sampled_here ? 1 : appends.size(), [&](size_t begin, size_t end) {
          for (size_t k = begin; k < end; ++k) {
            const int i = appends[k].slot;
            const Sequence& s = *running[size_t(i)];
            const SamplingParams& p = s.request.sampling;
            if (chosen_there(p)) {
              last_token[size_t(i)] = chosen[k];
              continue;
            }
            const double u = uniform(s, 0);
            Sampler& sampler = samplers_[size_t(i)];
            if (h != Handover::top_k) {
              last_token[size_t(i)] = sampler.sample(logits.data() + k * V, s.history, p, u);
              continue;
            }
            const size_t K = size_t(top_k);
            const std::span<const int32_t> tokens(top_tokens.data() + k * K, K);
            if (p.argmax_of_logits(penalised))  // its first candidate (none: every logit NaN, token 0)
              last_token[size_t(i)] = std::max(tokens[0], 0);
            else
              last_token[size_t(i)] = sampler.sample_top_k(tokens, {top_logits.data() + k * K, K}, p, u);
          }
        });
      }
    }

    // A queued step: the next one goes on the model's queue behind it where it is sure to follow
    // (the same rows, each with the token this one chooses), so that the device runs it while this
    // thread takes this step's tokens in. Slots free up, and requests come in, only once nothing
    // is queued: a sequence that ends at a step with one queued behind it has a row there that
    // was computed for nothing and is passed over.
    const bool chain = certain_ahead();
    if (chain) {
      ahead.assign(appends.begin(), appends.end());
      for (AppendRequest& a : ahead) a.tokens = {};
      queue(ahead, true);
    }
    if (queued) {
      model_.take_choices(chosen.data());
      for (size_t k = 0; k < appends.size(); ++k) last_token[size_t(appends[k].slot)] = chosen[k];
    }
    for (size_t k = 0; k < appends.size(); ++k) {
      const int i = appends[k].slot;
      if (!running[size_t(i)]) continue;  // ended at the step before
      ++stats.generated_tokens;
      if (advance(*running[size_t(i)], last_token[size_t(i)], i, sink)) {
        running[size_t(i)].reset();
        model_.reset(i);
        --active;
      }
    }
    if (chain) appends.swap(ahead);
    queued = chain;
  }
}

std::optional<GenerationRequest> ListSource::next(bool) {
  if (next_ == requests_.size()) return std::nullopt;
  return std::move(requests_[next_++]);
}

std::vector<Completion> generate(InferenceModel& model, const Tokenizer& tokenizer,
                                 std::vector<GenerationRequest> requests) {
  struct Collect final : CompletionSink {
    std::vector<Completion> completions;
    void text(size_t, std::string_view) override {}
    void done(size_t id, Completion c) override { completions[id] = std::move(c); }
  } sink;
  sink.completions.resize(requests.size());
  ListSource source(std::move(requests));
  Generator(model, tokenizer).run(source, sink);
  return std::move(sink.completions);
}

}  // namespace meg
