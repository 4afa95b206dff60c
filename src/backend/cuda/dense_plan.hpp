#pragma once
// Internal: how dense_bias_act's CUDA kernel (dense.cpp) lays a row-major y[m, n] = x[m, k] W[k, n]
// out as one column-major cuBLASLt matmul: D = op(A) op(B) with A = W, B = x, D = y, since a
// row-major matrix is its transpose in column-major order (y^T = W^T x^T). Plain C++ with no CUDA
// header, so that tests/unit/test_cuda_dense_update.cpp checks it on the CPU by running the
// matmul these descriptors describe.
#include <algorithm>
#include <cstdint>

namespace soma::cuda_detail {

// A column-major matrix as cuBLASLt's layout describes it (rows x cols, leading dimension ld),
// used transposed or not.
struct MatrixDesc {
  bool ok = false;     // false: the view fits no layout; the caller packs it first
  bool trans = false;  // op(M) = M^T
  std::int64_t rows = 0, cols = 0, ld = 1;
};

// A row-major view [rows, cols] with element strides (rs, cs) as the operand that must act as its
// transpose [cols, rows] in the column-major product: rows packed (cs 1, rs >= cols) is that
// transpose stored column-major with ld rs; columns packed (a transposed view: rs 1, cs >= rows)
// is the matrix itself stored column-major with ld cs, used transposed. Size-1 dimensions take
// any stride.
inline MatrixDesc transposed_operand(std::int64_t rows, std::int64_t cols, std::int64_t rs,
                                     std::int64_t cs) {
  if (cols <= 1) cs = 1;
  if (rows <= 1) rs = std::max<std::int64_t>(cols, 1);
  if (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) return {true, false, cols, rows, rs};
  if (rows > 1 && cols > 1 && rs == 1 && cs >= rows) return {true, true, rows, cols, cs};
  return {};
}

struct DenseGemm {
  MatrixDesc a, b, d;  // A = W^T (n x k after op), B = x^T (k x m after op), D = y^T (n x m)
};

// x: m rows of k with strides (x_rs, x_cs); W: [k, n] with strides (w_rs, w_cs); y packed [m, n].
// The bias (n values) is added along D's rows: the epilogue's broadcast over D's columns.
inline DenseGemm dense_gemm(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t x_rs,
                            std::int64_t x_cs, std::int64_t w_rs, std::int64_t w_cs) {
  DenseGemm g;
  g.a = transposed_operand(k, n, w_rs, w_cs);
  g.b = transposed_operand(m, k, x_rs, x_cs);
  g.d = {true, false, n, m, std::max<std::int64_t>(n, 1)};
  return g;
}

}  // namespace soma::cuda_detail
