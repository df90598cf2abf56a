// Products of a few input rows against a weight matrix that is read once: the linear layers of a
// CPU decode step (ops/cpu/matmul.cpp's linear_forward for up to its kRowsBeforeGemm rows).
#pragma once

namespace meg::cpu::detail {

// The input rows few_rows_product() multiplies by a weight row at once: its 8 sums of 8 lanes, a
// weight vector and an input vector fill 10 of an AVX2 machine's 16 vector registers; 16 rows
// would spill. More rows go in groups of kFewRows.
constexpr int kFewRows = 8;

// out[n, o] += sum over c of inp[n, c] * W[o, c], for n < N (at least 1) and o < OC: each weight
// row is read from memory once for all N input rows (past kFewRows, from the cache for the later
// groups). Every output is summed in the same order whatever N, the machine's vector width and the
// thread count, so a row's result is the same alone or whichever rows share its step, and
// wherever it runs.
// PORTABLE: take the path of machines without AVX2 whatever this one has (tests compare the two).
void few_rows_product(float* out, const float* inp, const float* W, int N, int C, int OC, bool portable = false);

}  // namespace meg::cpu::detail
