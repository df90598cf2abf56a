// Row-major GEMM for the CPU ops, one name for float (cblas_sgemm) and double (cblas_dgemm).
// Private to lib/ops/cpu: only these .cpp files see <cblas.h>.
#pragma once

#include <cblas.h>

namespace meg::cpu::detail {

// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, all row-major with leading dimensions
// lda, ldb, ldc (the distance between rows, which lets a GEMM read one head out of [T,NH,HS]).
inline void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void gemm(bool transA, bool transB, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace meg::cpu::detail
