// The expert bias's update (see expert_bias.hpp).
#include "moe/expert_bias.hpp"

namespace meg {

void update_expert_bias(float* bias, const double* counts, int64_t E, double rate) {
  double mean = 0;
  for (int64_t e = 0; e < E; ++e) mean += counts[e];
  mean /= double(E);
  for (int64_t e = 0; e < E; ++e) {
    const double offset = mean - counts[e];
    bias[e] += float(rate * double((offset > 0) - (offset < 0)));
  }
}

}  // namespace meg
