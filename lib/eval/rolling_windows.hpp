// lm-evaluation-harness's loglikelihood_rolling: a document longer than the model's context is
// scored in windows so that every token is predicted exactly once, each from as many tokens
// before it as fit (get_rolling_token_windows with context_len 1, then make_disjoint_window).
//
// With L = MAX_LENGTH: the first window predicts tokens [0, min(L, n)) from PREFIX followed by
// the tokens before each; every later window predicts the next up to L tokens, its context the
// tokens just before them, so that context and prediction make L + 1 tokens (the model sees the
// first L). The log-likelihood of the document is the sum over its windows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace meg {

struct TokenWindow {
  std::vector<int32_t> context, continuation;  // continuation: the tokens predicted
};

// The windows of TOKENS (none when it is empty); MAX_LENGTH >= 1.
std::vector<TokenWindow> rolling_windows(std::span<const int32_t> tokens, int32_t prefix, int max_length);

}  // namespace meg
