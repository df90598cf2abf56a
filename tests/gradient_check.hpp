// Gradients of the CPU model against finite differences, for any config (the families' micro
// models, a test's own layer kinds).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"

namespace meg {

// Checks the gradients of every tensor of CONFIG's model (in double, weights drawn larger than
// usual and perturbed) against five-point central differences of the loss of a 2 x 8 batch;
// with dropout P > 0 (hidden and attention), every forward runs with the same key, hence the same
// masks. Also checks that a second backward accumulates.
inline void check_gradients_against_differences(ModelConfig c, double p) {
  const auto close = [](double a, double b, double rel) { return std::abs(a - b) <= rel * std::abs(b); };
  c.init_std = 0.2;  // larger weights make every path's gradient clearly non-zero
  c.hidden_dropout = p;
  c.attention_dropout = p;
  GptModel<double> m(c);
  m.init(1);
  m.set_dropout_key(17, 4, 1);
  // Perturb norms and biases away from their 1/0 initialisation.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.1);
  for (size_t i = 0; i < m.num_parameters(); ++i) m.params()[i] += noise(rng);

  const int B = 2, T = int(std::min<int64_t>(c.seq_length, 8)), V = int(c.vocab_size);
  const auto tokens = random_tokens(B * T, V, 11);
  auto targets = random_tokens(B * T, V, 12);
  targets[3] = -1;  // an ignored position
  m.zero_grad();
  const double loss = m.forward(tokens.data(), targets.data(), B, T);
  m.backward();
  const std::vector<double> grad(m.grads(), m.grads() + m.num_parameters());

  // Gradient accumulation: a second backward of the same batch doubles the gradient.
  m.backward();
  for (size_t i = 0; i < grad.size(); i += 97) CHECK(close(m.grads()[i], 2 * grad[i], 1e-12));

  const double h = 1e-4;
  double worst = 0;
  std::string worst_name;
  int checked = 0, significant = 0;
  for (const auto& t : m.tensors()) {
    std::vector<size_t> idx;
    std::mt19937 pick(static_cast<uint32_t>(t.offset));
    for (int s = 0; s < 5; ++s) idx.push_back(pick() % t.numel);
    if (t.name.find("embedding") != std::string::npos || t.name == "output_layer.weight") {
      // Rows the batch touches (a used token, a target, a position).
      const size_t C = static_cast<size_t>(c.hidden_size);
      idx.push_back(static_cast<size_t>(tokens[5]) * C + 3);
      idx.push_back(static_cast<size_t>(targets[6]) * C + 7);
    }
    for (size_t j : idx) {
      double* w = m.params() + t.offset + j;
      const double saved = *w;
      auto loss_at = [&](double value) {
        *w = value;
        return m.forward(tokens.data(), targets.data(), B, T);
      };
      // Five-point central difference: error O(h^4).
      const double fd = (8 * (loss_at(saved + h) - loss_at(saved - h)) -
                         (loss_at(saved + 2 * h) - loss_at(saved - 2 * h))) /
                        (12 * h);
      *w = saved;
      const double an = grad[t.offset + j];
      // Relative error, with a floor for gradients that are (mathematically) zero.
      const double err = std::abs(fd - an) / std::max(std::abs(fd) + std::abs(an), 1e-4);
      if (err > worst) {
        worst = err;
        worst_name = t.name;
      }
      ++checked;
      if (std::abs(an) > 1e-4) ++significant;
    }
  }
  INFO("worst " << worst << " in " << worst_name << ", loss " << loss << "; " << significant
                << " of " << checked << " gradients above 1e-4");
  CHECK(worst < 1e-6);
  CHECK(checked >= 5 * static_cast<int>(m.tensors().size()));
  CHECK(significant > checked * 3 / 4);
}

}  // namespace meg
