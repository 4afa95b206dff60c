#pragma once
// soma::linalg: matrix decompositions and solvers through LAPACK (CPU) over the last two dims,
// batched over the leading ones, in f32 and f64, with gradients written with ops
// (docs/linalg.md). Each is a registered op (linalg_solve, linalg_inv, ...), so it also works
// under the tape, in graph mode and on CUDA tensors.
//
// Conventions (those of NumPy / PyTorch where they fix one):
//  - A singular matrix in solve/inv, or one that is not positive definite in cholesky, is a
//    soma::Error naming the op, the batch index and what was expected (never NaN garbage).
//  - A matrix with a NaN or inf gives NaN outputs for that matrix (propagated, not refused).
//  - cholesky and eigh read only the lower triangle (UPLO 'L'); their gradients are the
//    gradients of that function, so they land in the lower triangle.
//  - qr is the reduced one (Q m x k, R k x n, k = min(m, n)) with R's diagonal made
//    non-negative, which makes it unique for a full-rank A.
//  - svd is the reduced one (U m x k, S k descending, Vh k x n; A = U diag(S) Vh); eigh gives
//    ascending eigenvalues. Each eigenvector / left singular vector is signed so that its
//    largest-magnitude entry is positive (the right singular vector flips with it).
//  - Gradients assume what makes them finite: an invertible A (solve, inv, det, slogdet),
//    distinct eigenvalues (eigh) or distinct non-zero singular values (svd).
#include "soma/tensor.hpp"

namespace soma::linalg {

// X with A X = B: A [..., n, n]; B [..., n, k] (batch dims broadcast), or B [..., n] with A's
// batch dims (one vector per matrix).
Tensor solve(const Tensor& a, const Tensor& b);
Tensor inv(const Tensor& a);  // [..., n, n]
Tensor det(const Tensor& a);  // [..., n, n] -> [...]

struct SlogdetResult {
  Tensor sign;       // -1, 0 or 1 (0 for a singular matrix, whose logabsdet is -inf)
  Tensor logabsdet;  // log |det A|
};
SlogdetResult slogdet(const Tensor& a);

Tensor cholesky(const Tensor& a);  // lower L with L L^T = A, [..., n, n]

struct QRResult {
  Tensor q;  // [..., m, k], orthonormal columns
  Tensor r;  // [..., k, n], upper triangular
};
QRResult qr(const Tensor& a);

struct SVDResult {
  Tensor u;   // [..., m, k]
  Tensor s;   // [..., k], descending
  Tensor vh;  // [..., k, n]
};
SVDResult svd(const Tensor& a);

struct EighResult {
  Tensor eigenvalues;   // [..., n], ascending
  Tensor eigenvectors;  // [..., n, n], column j belongs to eigenvalue j
};
EighResult eigh(const Tensor& a);

}  // namespace soma::linalg
