#include "eval/scorer.hpp"

#include "core/device.hpp"
#include "core/error.hpp"
#include "eval/cpu_scorer.hpp"

namespace meg {

std::unique_ptr<Scorer> make_scorer(const CheckpointModel& checkpoint, const std::string& device, Precision precision,
                                    int max_batch) {
  if (device == "cpu") {
    if (precision != Precision::fp32)
      input_error("--precision {}: the CPU path computes in fp32 only; use --device cuda", precision_name(precision));
    return std::make_unique<CpuScorer>(checkpoint, max_batch);
  }
  if (device == "cuda") {
    require_cuda_devices();
#if MEG_CUDA
    return make_cuda_scorer(checkpoint, precision, max_batch);
#endif
  }
  input_error("--device '{}': expected cpu or cuda", device);
}

}  // namespace meg
