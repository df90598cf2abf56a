// make_inference_model: the CPU model, or the CUDA one in a CUDA build.
#include "infer/inference_model.hpp"

#include "core/device.hpp"
#include "core/error.hpp"
#include "infer/cpu_inference_model.hpp"

namespace meg {

std::unique_ptr<InferenceModel> make_inference_model(const CheckpointModel& checkpoint, const std::string& device,
                                                     Precision precision, int slots, int max_length) {
  if (device == "cpu") {
    if (precision != Precision::fp32)
      input_error("--precision {}: the CPU path computes in fp32 only; use --device cuda", precision_name(precision));
    return std::make_unique<CpuInferenceModel>(checkpoint.config, checkpoint.params, slots, max_length);
  }
  if (device == "cuda") {
    require_cuda_devices();
#if MEG_CUDA
    return make_cuda_inference_model(checkpoint, precision, slots, max_length);
#endif
  }
  input_error("--device '{}': expected cpu or cuda", device);
}

}  // namespace meg
