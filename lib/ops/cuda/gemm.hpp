// The matrix products of the CUDA path, through cuBLASLt.
//
// Everything in meg is row-major; cuBLAS is column-major. A row-major [R, C] matrix is the same
// bytes as a column-major [C, R] one, i.e. its transpose, so each product below is computed as
// its transpose, with the operands swapped (the comments give the row-major meaning).
//
// Types: X operands (fp32, bf16 or fp16) with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 in
// fp32 mode, which exists for checking). Weight gradients are written in fp32 straight into the
// fp32 gradient array with beta = 1, so accumulation over micro-batches happens inside the GEMM.
//
// Fused epilogues, where cuBLASLt has them for the shape and types: the bias of the forward; GELU
// with its input kept for the backward (GELU_AUX_BIAS), and the GELU derivative applied to the
// input gradient (DGELU). Each saves a pass over an activation. Not the bias gradient (BGRADB):
// cuBLASLt runs it as a kernel of its own, slower than ours. The fused calls return false, having
// done nothing, when
// cuBLASLt offers no algorithm for the fusion; the caller then runs the unfused product and the
// separate kernel. cuBLASLt's GELU is the tanh approximation, GPT-2's (the GPU tests check it
// against the CPU reference in fp32).
//
// A product's descriptors and the algorithm the heuristic picks are cached by shape, so the
// per-call cost after the first step is one cublasLtMatmul. cuBLAS gives the same bits from run
// to run for the same algorithm on the same GPU model (atomics stay off), which exact resume needs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace meg::cuda {

class Gemm {
 public:
  // A cuBLASLt handle and a workspace on STREAM, where every product is queued.
  explicit Gemm(cudaStream_t stream, size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[N,OC] = inp[N,C] @ W[OC,C]^T (+ bias[OC], fused into the product; bias may be null).
  template <typename X>
  void linear_forward(X* out, const X* inp, const X* W, const X* bias, int N, int C, int OC);

  // dinp[N,C] = dout[N,OC] @ W[OC,C] (written).
  template <typename X>
  void linear_backward_input(X* dinp, const X* dout, const X* W, int N, int C, int OC);

  // dW[OC,C] += dout[N,OC]^T @ inp[N,C], in fp32.
  template <typename X>
  void linear_backward_weight(float* dW, const X* dout, const X* inp, int N, int C, int OC);

  // out[N,OC] = gelu(inp @ W^T + bias) and pre_gelu[N,OC] = inp @ W^T + bias (bias may be null).
  template <typename X>
  bool linear_gelu_forward(X* out, X* pre_gelu, const X* inp, const X* W, const X* bias, int N,
                           int C, int OC);

  // dinp[N,C] = (dout[N,OC] @ W[OC,C]) * gelu'(pre_gelu[N,C]) (written): the backward of
  // linear_gelu_forward's GELU through the product that follows it.
  template <typename X>
  bool linear_dgelu_backward_input(X* dinp, const X* dout, const X* W, const X* pre_gelu, int N,
                                   int C, int OC);

 private:
  struct Plan;
  // The epilogue of one product (a cublasLtEpilogue_t value and its pointers).
  struct Epilogue {
    int kind = 1;  // CUBLASLT_EPILOGUE_DEFAULT
    const void* bias = nullptr;
    void* aux = nullptr;         // the GELU input: written (forward) or read (backward)
    int64_t aux_ld = 0;
  };
  // Column-major D[m,n] = alpha op(A) op(B) + beta D (+ the epilogue), with A [m,k] (or [k,m] when
  // trans_a), B [k,n] (or [n,k] when trans_b); a_type/b_type/d_type are cudaDataType_t values.
  // Returns false when cuBLASLt has no algorithm for a fused epilogue (nothing was queued);
  // throws for a plain product without one.
  bool matmul(void* d, int d_type, const void* a, int a_type, bool trans_a, const void* b,
              int b_type, bool trans_b, int m, int n, int k, float beta, const Epilogue& epi);

  cudaStream_t stream_;
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  using Key = std::tuple<int, int, int, bool, bool, int, int, int, bool, int, bool, int64_t>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace meg::cuda
