// Row-major GEMM and GEMV for the CPU ops, one name for float (cblas_s*) and double (cblas_d*).
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

// y[rows] = alpha * A[rows, cols] @ x + beta * y, A row-major with leading dimension lda.
inline void gemv(int rows, int cols, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, alpha, A, lda, x, 1, beta, y, 1);
}

inline void gemv(int rows, int cols, double alpha, const double* A, int lda, const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, rows, cols, alpha, A, lda, x, 1, beta, y, 1);
}

}  // namespace meg::cpu::detail
