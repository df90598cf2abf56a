#include "eval/metrics.hpp"

#include <cmath>
#include <numbers>

#include "eval/python_text.hpp"

namespace meg {
namespace {

// lm-eval's mean_stderr: the sample standard deviation over sqrt(n).
std::optional<double> mean_stderr(const std::vector<double>& xs, double mean) {
  if (xs.size() < 2) return std::nullopt;
  double ss = 0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(xs.size() - 1)) / std::sqrt(double(xs.size()));
}

Metric mean_metric(const std::string& name, const std::vector<double>& xs) {
  double sum = 0;
  for (double x : xs) sum += x;
  const double mean = sum / double(xs.size());
  return {name, mean, mean_stderr(xs, mean)};
}

// The first index of the largest value, as numpy's argmax.
size_t argmax(const std::vector<double>& xs) {
  size_t best = 0;
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i] > xs[best]) best = i;
  return best;
}

}  // namespace

std::vector<Metric> compute_metrics(const Task& task, std::span<const Request> requests,
                                    std::span<const RequestScore> scores) {
  // Per document: its requests' log-likelihoods in order, and whether all were greedy.
  std::vector<std::vector<double>> lls(task.scored);
  std::vector<bool> greedy(task.scored, true);
  uint64_t tokens = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    lls[requests[i].doc].push_back(scores[i].loglikelihood);
    greedy[requests[i].doc] = greedy[requests[i].doc] && scores[i].greedy;
    tokens += requests[i].continuation_tokens.size();
  }
  const auto n = double(task.scored);
  switch (task.type) {
    case TaskType::perplexity: {
      double ll = 0, words = 0, bytes = 0;
      for (size_t d = 0; d < task.scored; ++d) {
        for (double x : lls[d]) ll += x;
        words += double(task.docs[d].words);
        bytes += double(task.docs[d].bytes);
      }
      std::vector<Metric> m;
      if (!task.tokenized)
        m = {{"word_perplexity", std::exp(-ll / words), {}},
             {"byte_perplexity", std::exp(-ll / bytes), {}},
             {"bits_per_byte", -ll / bytes / std::numbers::ln2, {}}};
      m.push_back({"token_perplexity", std::exp(-ll / double(tokens)), {}});
      return m;
    }
    case TaskType::lambada: {
      std::vector<double> acc(task.scored);
      double ll = 0;
      for (size_t d = 0; d < task.scored; ++d) {
        acc[d] = greedy[d] ? 1 : 0;
        ll += lls[d].at(0);
      }
      return {mean_metric("acc", acc), {"perplexity", std::exp(-ll / n), {}}};
    }
    case TaskType::multiple_choice: {
      std::vector<double> acc(task.scored), acc_norm(task.scored);
      for (size_t d = 0; d < task.scored; ++d) {
        const EvalDoc& doc = task.docs[d];
        std::vector<double> normalised(lls[d]);
        for (size_t c = 0; c < normalised.size(); ++c) normalised[c] /= double(py::length(doc.choices[c]));
        acc[d] = argmax(lls[d]) == size_t(doc.gold) ? 1 : 0;
        acc_norm[d] = argmax(normalised) == size_t(doc.gold) ? 1 : 0;
      }
      return {mean_metric("acc", acc), mean_metric("acc_norm", acc_norm)};
    }
  }
  return {};
}

}  // namespace meg
