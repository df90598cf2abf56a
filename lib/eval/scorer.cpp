#include "eval/scorer.hpp"

#include <stdexcept>

#include "core/device.hpp"
#include "core/error.hpp"
#include "eval/cpu_scorer.hpp"

namespace meg {

std::unique_ptr<Scorer> make_scorer(const CheckpointModel& checkpoint, const std::string& device, Precision precision,
                                    int max_batch) {
  if (checked_device(device, precision) == Device::cpu) return std::make_unique<CpuScorer>(checkpoint, max_batch);
#if MEG_CUDA
  return make_cuda_scorer(checkpoint, precision, max_batch);
#else
  throw std::logic_error("make_scorer: checked_device let cuda through in a build without CUDA");
#endif
}

}  // namespace meg
