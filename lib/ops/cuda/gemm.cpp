#include "ops/cuda/gemm.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <fmt/format.h>

#include <stdexcept>
#include <type_traits>

#include "ops/cuda/check.hpp"

namespace meg::cuda {

namespace {

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuBLASLt: {} failed: {}", what, cublasLtGetStatusString(status)));
}

template <typename X>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<X, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return CUDA_R_16BF;
  else return CUDA_R_16F;
}

cublasLtHandle_t lt(void* handle) { return static_cast<cublasLtHandle_t>(handle); }

}  // namespace

// One product's descriptors and chosen algorithm.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(cudaStream_t stream, size_t workspace_bytes) : stream_(stream), workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  check_blas(cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
  MEG_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  plans_.clear();
  cudaFree(workspace_);
  cublasLtDestroy(lt(handle_));
}

bool Gemm::matmul(void* d, int d_type, const void* a, int a_type, bool trans_a, const void* b, int b_type,
                  bool trans_b, int m, int n, int k, float beta, const Epilogue& epi) {
  const Key key{d_type, a_type, b_type, trans_a, trans_b, m, n, k, beta != 0.0f, epi.kind, epi.bias != nullptr,
                epi.aux_ld};
  auto found = plans_.find(key);
  if (found == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    check_blas(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_blas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    check_blas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    const auto kind = static_cast<cublasLtEpilogue_t>(epi.kind);
    check_blas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind, sizeof(kind)),
               "epilogue");
    if (epi.bias) {
      const cudaDataType_t bt = static_cast<cudaDataType_t>(a_type);
      check_blas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
                 "bias type");
    }
    if (epi.aux_ld)
      check_blas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &epi.aux_ld,
                                                sizeof(epi.aux_ld)),
                 "aux leading dimension");
    // Stored shapes: op(A) is [m,k], so A itself is [k,m] when transposed; likewise B.
    const auto at = static_cast<cudaDataType_t>(a_type), bt = static_cast<cudaDataType_t>(b_type),
               dt = static_cast<cudaDataType_t>(d_type);
    check_blas(cublasLtMatrixLayoutCreate(&plan->a, at, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m), "A layout");
    check_blas(cublasLtMatrixLayoutCreate(&plan->b, bt, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k), "B layout");
    check_blas(cublasLtMatrixLayoutCreate(&plan->d, dt, m, n, m), "D layout");

    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "preference");
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)),
               "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt(handle_), plan->desc, plan->a, plan->b, plan->d,
                                                             plan->d, pref, 1, &result, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || count == 0) {
      if (kind != CUBLASLT_EPILOGUE_DEFAULT && kind != CUBLASLT_EPILOGUE_BIAS) {
        plans_.emplace(key, nullptr);  // remembered: the caller falls back, every time
        return false;
      }
      throw std::runtime_error(fmt::format("cuBLASLt: no algorithm for a {}x{}x{} product (types {}/{}/{})", m, n, k,
                                           a_type, b_type, d_type));
    }
    plan->algo = result.algo;
    found = plans_.emplace(key, std::move(plan)).first;
  }
  if (!found->second) return false;
  Plan& p = *found->second;
  if (epi.bias)
    check_blas(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi.bias, sizeof(epi.bias)),
               "bias pointer");
  if (epi.aux)
    check_blas(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &epi.aux,
                                              sizeof(epi.aux)),
               "aux pointer");
  const float alpha = 1.0f;
  check_blas(cublasLtMatmul(lt(handle_), p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo, workspace_,
                            workspace_bytes_, stream_),
             "cublasLtMatmul");
  return true;
}

// Row-major out[N,OC] = inp[N,C] W^T is column-major out^T[OC,N] = W[OC,C] inp^T, where the
// column-major view of W is [C,OC] (so op = T) and that of inp is [C,N].
template <typename X>
void Gemm::linear_forward(X* out, const X* inp, const X* W, const X* bias, int N, int C, int OC) {
  constexpr int t = data_type<X>();
  Epilogue epi;
  if (bias) epi = {CUBLASLT_EPILOGUE_BIAS, bias, nullptr, 0};
  matmul(out, t, W, t, true, inp, t, false, OC, N, C, 0.0f, epi);
}

// The same product with GELU applied in the epilogue and its input stored as the auxiliary
// output, whose leading dimension (OC, the rows of the column-major view) must be a multiple of 8.
template <typename X>
bool Gemm::linear_gelu_forward(X* out, X* pre_gelu, const X* inp, const X* W, const X* bias, int N, int C, int OC) {
  if (OC % 8 != 0) return false;
  constexpr int t = data_type<X>();
  const Epilogue epi{bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, pre_gelu, OC};
  return matmul(out, t, W, t, true, inp, t, false, OC, N, C, 0.0f, epi);
}

// dinp[N,C] = dout[N,OC] W[OC,C]: column-major dinp^T[C,N] = W^T-view[C,OC] dout^T-view[OC,N].
template <typename X>
void Gemm::linear_backward_input(X* dinp, const X* dout, const X* W, int N, int C, int OC) {
  constexpr int t = data_type<X>();
  matmul(dinp, t, W, t, false, dout, t, false, C, N, OC, 0.0f, {});
}

template <typename X>
bool Gemm::linear_dgelu_backward_input(X* dinp, const X* dout, const X* W, const X* pre_gelu, int N, int C, int OC) {
  if (C % 8 != 0) return false;
  constexpr int t = data_type<X>();
  const Epilogue epi{CUBLASLT_EPILOGUE_DGELU, nullptr, const_cast<X*>(pre_gelu), C};
  return matmul(dinp, t, W, t, false, dout, t, false, C, N, OC, 0.0f, epi);
}

// dW[OC,C] += dout^T inp: column-major dW^T[C,OC] += inp-view[C,N] (dout-view[OC,N])^T.
template <typename X>
void Gemm::linear_backward_weight(float* dW, const X* dout, const X* inp, int N, int C, int OC) {
  constexpr int t = data_type<X>();
  matmul(dW, CUDA_R_32F, inp, t, false, dout, t, true, C, OC, N, 1.0f, {});
}

#define MEG_GEMM_INSTANTIATE(X)                                                                         \
  template void Gemm::linear_forward<X>(X*, const X*, const X*, const X*, int, int, int);             \
  template bool Gemm::linear_gelu_forward<X>(X*, X*, const X*, const X*, const X*, int, int, int);     \
  template void Gemm::linear_backward_input<X>(X*, const X*, const X*, int, int, int);                \
  template bool Gemm::linear_dgelu_backward_input<X>(X*, const X*, const X*, const X*, int, int, int); \
  template void Gemm::linear_backward_weight<X>(float*, const X*, const X*, int, int, int);          
MEG_GEMM_INSTANTIATE(float)
MEG_GEMM_INSTANTIATE(__nv_bfloat16)
MEG_GEMM_INSTANTIATE(__half)
#undef MEG_GEMM_INSTANTIATE

}  // namespace meg::cuda
