#include "optim/adamw_cuda.hpp"

#include <cmath>

#include "core/error.hpp"
#include "ops/cuda/check.hpp"

namespace meg {

namespace {
std::vector<ParamGroup> tensor_groups(const std::vector<ParamTensor>& tensors) {
  std::vector<ParamGroup> groups;
  for (const auto& t : tensors) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
  return groups;
}
}  // namespace

CudaAdamW::CudaAdamW(const std::vector<ParamTensor>& tensors, const AdamWOptions& options,
                     cuda::DeviceAllocator& alloc, cudaStream_t stream)
    : CudaAdamW(tensor_groups(tensors), tensors.empty() ? 0 : tensors.back().offset + tensors.back().numel, options,
                alloc, stream) {}

CudaAdamW::CudaAdamW(const std::vector<ParamGroup>& groups, size_t n, const AdamWOptions& options,
                     cuda::DeviceAllocator& alloc, cudaStream_t stream)
    : options_(options), n_(n), stream_(stream), alloc_(alloc) {
  m_ = cuda::DeviceArray<float>(alloc, n_);
  v_ = cuda::DeviceArray<float>(alloc, n_);
  MEG_CUDA_CHECK(cudaMemsetAsync(m_.get(), 0, m_.bytes(), stream_));
  MEG_CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, v_.bytes(), stream_));
  std::vector<cuda::AdamWSegment> segs;
  for (const auto& g : groups)
    if (g.end > g.begin)
      segs.push_back({g.begin, g.end - g.begin, g.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f});
  num_segments_ = static_cast<int>(segs.size());
  segments_ = cuda::DeviceArray<cuda::AdamWSegment>(alloc, segs.size());
  MEG_CUDA_CHECK(cudaMemcpy(segments_.get(), segs.data(), segs.size() * sizeof(segs[0]), cudaMemcpyHostToDevice));
  norm_ = cuda::DeviceArray<double>(alloc, 1);
  norm_scratch_ = cuda::DeviceArray<double>(alloc, cuda::sum_squares_scratch(n_));
}

std::vector<double> CudaAdamW::grad_sum_squares(const float* grads, const std::vector<GradRange>& ranges) {
  std::vector<double> sums(ranges.size(), 0.0);
  if (ranges.empty()) return sums;
  if (norm_.size() < ranges.size()) norm_ = cuda::DeviceArray<double>(alloc_, ranges.size());
  // The ranges run one after the other on the stream, so they can share the scratch.
  for (size_t k = 0; k < ranges.size(); ++k)
    cuda::sum_squares(norm_.get() + k, grads + ranges[k].begin, ranges[k].end - ranges[k].begin, norm_scratch_.get(),
                      stream_);
  MEG_CUDA_CHECK(cudaMemcpyAsync(sums.data(), norm_.get(), sums.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                 stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return sums;
}

template <typename X>
void CudaAdamW::step(float* params, X* params_x, const float* grads, double lr, double grad_scale) {
  ++step_;
  cuda::adamw_step(params, params_x, grads, m_.get(), v_.get(), segments_.get(), num_segments_, static_cast<float>(lr),
                   static_cast<float>(options_.beta1), static_cast<float>(options_.beta2),
                   static_cast<float>(options_.eps), static_cast<float>(grad_scale), step_, stream_);
}
template void CudaAdamW::step<float>(float*, float*, const float*, double, double);
template void CudaAdamW::step<__nv_bfloat16>(float*, __nv_bfloat16*, const float*, double, double);
template void CudaAdamW::step<__half>(float*, __half*, const float*, double, double);

void CudaAdamW::get_state(std::vector<float>& m, std::vector<float>& v) const {
  m.resize(n_);
  v.resize(n_);
  MEG_CUDA_CHECK(cudaMemcpyAsync(m.data(), m_.get(), m_.bytes(), cudaMemcpyDeviceToHost, stream_));
  MEG_CUDA_CHECK(cudaMemcpyAsync(v.data(), v_.get(), v_.bytes(), cudaMemcpyDeviceToHost, stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaAdamW::restore(const std::vector<float>& m, const std::vector<float>& v, int64_t step_count) {
  if (m.size() != n_ || v.size() != n_)
    input_error("optimizer state of {} and {} values does not fit a model of {} parameters", m.size(), v.size(), n_);
  if (step_count < 0) input_error("optimizer step count {} is negative", step_count);
  MEG_CUDA_CHECK(cudaMemcpyAsync(m_.get(), m.data(), m_.bytes(), cudaMemcpyHostToDevice, stream_));
  MEG_CUDA_CHECK(cudaMemcpyAsync(v_.get(), v.data(), v_.bytes(), cudaMemcpyHostToDevice, stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_ = step_count;
}

}  // namespace meg
