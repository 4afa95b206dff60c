#pragma once
// f64 references of the LAPACK-backed linalg ops (src/ops/linalg_lapack.cpp) for the op test
// table: textbook algorithms (Gaussian elimination, Cholesky, Gram-Schmidt QR, Jacobi eigen and
// one-sided Jacobi SVD) written independently of LAPACK, on tiny matrices. They follow the ops'
// conventions: R's diagonal non-negative; eigenvalues ascending and singular values descending;
// each eigenvector (each left singular vector, its right one flipped with it) signed so that its
// largest-magnitude entry is positive. A matrix with a NaN or inf gives NaN outputs, as the ops do.
#include <vector>

#include "soma/op.hpp"

namespace soma::ref {

std::vector<Tensor> linalg_solve(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_inv(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_det(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_slogdet(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_cholesky(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_qr(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_svd(const std::vector<Tensor>&, const Attrs&);
std::vector<Tensor> linalg_eigh(const std::vector<Tensor>&, const Attrs&);

}  // namespace soma::ref
