// AdamW on the GPU: the moments live on the device next to the model's fp32 master weights, and a
// step is one fused multi-tensor launch (ops/cuda/ops.hpp: adamw_step) that also refreshes the
// model's bf16/fp16 compute copy. The same update as the CPU's AdamW (adamw.hpp), group for group:
// here a group is one tensor of the model's table, with weight decay where the table says so.
//
// The global gradient norm (for clipping and for the logs) is a deterministic device reduction;
// clipping, micro-batch averaging and loss-scale removal all fold into the one GRAD_SCALE factor
// the step multiplies the gradients by, so the gradients are read once per step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/param_tensor.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/ops.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_norm.hpp"

namespace meg {

class CudaAdamW {
 public:
  // Moments for the parameters of TENSORS (zeroed), on STREAM.
  CudaAdamW(const std::vector<ParamTensor>& tensors, const AdamWOptions& options, cuda::DeviceAllocator& alloc,
            cudaStream_t stream);
  // Moments for N parameters in GROUPS (tiling [0, N): a shard of the distributed optimizer).
  CudaAdamW(const std::vector<ParamGroup>& groups, size_t n, const AdamWOptions& options,
            cuda::DeviceAllocator& alloc, cudaStream_t stream);

  // The sum of the squares of GRADS over each of RANGES (offsets into GRADS), for the global
  // gradient norm (optim/grad_norm.hpp): one reduction per range, one wait for the device.
  // Non-finite where any gradient is.
  std::vector<double> grad_sum_squares(const float* grads, const std::vector<GradRange>& ranges);

  // One step at learning rate LR, the gradients multiplied by GRAD_SCALE first; refreshes
  // PARAMS_X (the compute copy; null when the master is the compute copy).
  template <typename X>
  void step(float* params, X* params_x, const float* grads, double lr, double grad_scale);

  int64_t step_count() const { return step_; }
  size_t size() const { return n_; }

  // State for checkpoints, as host arrays of size() floats.
  void get_state(std::vector<float>& m, std::vector<float>& v) const;
  void restore(const std::vector<float>& m, const std::vector<float>& v, int64_t step_count);

 private:
  AdamWOptions options_;
  size_t n_;
  cudaStream_t stream_;
  cuda::DeviceArray<float> m_, v_;
  cuda::DeviceArray<cuda::AdamWSegment> segments_;
  int num_segments_ = 0;
  cuda::DeviceAllocator& alloc_;
  cuda::DeviceArray<double> norm_;  // one sum per range
  cuda::DeviceArray<double> norm_scratch_;
  int64_t step_ = 0;
};

}  // namespace meg
