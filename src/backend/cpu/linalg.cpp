// CPU kernels for linalg ops. matmul: OpenBLAS GEMM for f32/f64 (transposed views go in as
// CblasTrans, no copy), f16/bf16 through f32, a plain loop for integers. Batch dims broadcast.
// Under bf16 autocast (soma/autocast.hpp) f32 products go to oneDNN's bf16 matmul instead; large
// f32 products at one thread go to oneDNN's sgemm (gemm_uses_onednn in onednn_matmul.cpp).
#include <cblas.h>
#include <omp.h>

#include <climits>
#include <optional>

#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "onednn_matmul.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

// A matrix operand as BLAS sees it: row-major, possibly transposed, with a leading dimension.
struct BlasLayout {
  bool ok = false;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  std::int64_t ld = 1;
};

// BLAS takes a matrix whose rows or columns are packed (unit stride) with the other stride at
// least the extent; anything else (negative, zero or interleaved strides) must be packed first.
BlasLayout blas_layout(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  // A stride along a dim of extent 1 is never used, so pick the one that fits.
  if (cols <= 1) cs = 1;
  if (rows <= 1) rs = std::max<std::int64_t>(cols, 1);
  if (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) return {true, CblasNoTrans, rs};
  if (rows <= 1 || cols <= 1) return {};
  if (rs == 1 && cs >= rows) return {true, CblasTrans, cs};
  return {};
}

Tensor packed_copy(const Tensor& t, DType dtype) {
  Tensor p = Tensor::empty(t.shape(), dtype, t.device());
  copy_into(t, p);
  return p;
}

// Element offsets (relative to each tensor's own offset) of every matrix in the broadcast batch.
void batch_offsets(const Tensor& t, const Shape& batch, std::vector<std::int64_t>& offs) {
  const std::size_t tb = std::size_t(t.rank()) - 2;
  Shape tshape(t.shape().begin(), t.shape().begin() + std::ptrdiff_t(tb));
  Strides tstr(t.strides().begin(), t.strides().begin() + std::ptrdiff_t(tb));
  Strides s = broadcast_strides(tshape, tstr, batch);
  const std::int64_t nb = numel(batch);
  offs.assign(std::size_t(nb), 0);
  std::vector<std::int64_t> idx(batch.size(), 0);
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < nb; ++i) {
    offs[std::size_t(i)] = off;
    for (std::size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) {
        off += s[d];
        break;
      }
      off -= (batch[d] - 1) * s[d];
      idx[d] = 0;
    }
  }
}

// A plain loop for any strides: integer matmul (accumulating in 64 bits, wrapping on the way
// back as NumPy does) and tiny float products, where a BLAS call costs more than the arithmetic.
template <class T, class Acc = std::conditional_t<std::is_floating_point_v<T>, T, std::int64_t>>
void matmul_loop(const Tensor& a, const Tensor& b, const Tensor& c, const Shape& batch) {
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const std::size_t ra = std::size_t(a.rank()), rb = std::size_t(b.rank());
  const std::int64_t ars = a.strides()[ra - 2], acs = a.strides()[ra - 1];
  const std::int64_t brs = b.strides()[rb - 2], bcs = b.strides()[rb - 1];
  std::vector<std::int64_t> oa, ob;
  batch_offsets(a, batch, oa);
  batch_offsets(b, batch, ob);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  const std::int64_t rows = numel(batch) * m;
  parallel_for(rows, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(n * k, 1)),
               [&](std::int64_t r0, std::int64_t r1) {
                 std::vector<Acc> acc(static_cast<std::size_t>(n));
                 for (std::int64_t r = r0; r < r1; ++r) {
                   const std::int64_t bi = r / m, i = r % m;
                   const T* x = pa + oa[std::size_t(bi)] + i * ars;
                   const T* y = pb + ob[std::size_t(bi)];
                   std::fill(acc.begin(), acc.end(), 0);
                   for (std::int64_t p = 0; p < k; ++p) {
                     const Acc xv = Acc(x[p * acs]);
                     const T* yr = y + p * brs;
                     Acc* ac = acc.data();
                     if (bcs == 1) {
                       for (std::int64_t j = 0; j < n; ++j) ac[j] += xv * Acc(yr[j]);
                     } else {
                       for (std::int64_t j = 0; j < n; ++j) ac[j] += xv * Acc(yr[j * bcs]);
                     }
                   }
                   T* z = pc + r * n;
                   for (std::int64_t j = 0; j < n; ++j) z[j] = T(acc[std::size_t(j)]);
                 }
               });
}

// Work per matrix (multiply-adds) below which the batch loop is threaded instead of BLAS, and
// below which the plain loop beats a BLAS call outright.
constexpr std::int64_t kSmallGemm = 48 * 48 * 48;
constexpr std::int64_t kTinyGemm = 12 * 12 * 12;

template <class T>
void gemm_batched(Tensor a, Tensor b, const Tensor& c, const Shape& batch) {
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  if (m * n * k <= kTinyGemm) return matmul_loop<T>(a, b, c, batch);
  const std::size_t ra = std::size_t(a.rank()), rb = std::size_t(b.rank());
  BlasLayout la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
  if (!la.ok) {
    a = packed_copy(a, a.dtype());
    la = {true, CblasNoTrans, std::max<std::int64_t>(k, 1)};
  }
  BlasLayout lb = blas_layout(k, n, b.strides()[rb - 2], b.strides()[rb - 1]);
  if (!lb.ok) {
    b = packed_copy(b, b.dtype());
    lb = {true, CblasNoTrans, std::max<std::int64_t>(n, 1)};
  }
  std::vector<std::int64_t> oa, ob;
  batch_offsets(a, batch, oa);
  batch_offsets(b, batch, ob);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  const int M = int(m), N = int(n), K = int(k);
  const int lda = int(la.ld), ldb = int(lb.ld), ldc = int(std::max<std::int64_t>(n, 1));
  const std::int64_t nb = numel(batch);
  const std::int64_t work = m * n * k;
  const bool batch_threaded = nb > 1 && work < kSmallGemm;
  // Threads of each library call (internal/parallel.hpp's grain rule).
  const int call_threads = batch_threaded ? 1 : threads_for(work, kGemmGrain);
  bool onednn = false;
  if constexpr (std::is_same_v<T, float>)
    onednn = !batch_threaded && M > 1 && gemm_uses_onednn(m, n, k, call_threads);
  auto one = [&](std::int64_t i) {
    const T* x = pa + oa[std::size_t(i)];
    const T* y = pb + ob[std::size_t(i)];
    T* z = pc + i * m * n;
    if (M == 1) {
      // One row (batch-1 inference, a vector times a matrix): GEMV skips GEMM's packing, which
      // costs more than the arithmetic here. The row x is unit-stride (blas_layout ensures it).
      const auto tr = lb.trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
      const int rows = lb.trans == CblasNoTrans ? K : N, cols = lb.trans == CblasNoTrans ? N : K;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemv(CblasRowMajor, tr, rows, cols, 1.0f, y, ldb, x, 1, 0.0f, z, 1);
      else
        cblas_dgemv(CblasRowMajor, tr, rows, cols, 1.0, y, ldb, x, 1, 0.0, z, 1);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (onednn && onednn_sgemm(la.trans == CblasTrans, lb.trans == CblasTrans, M, N, K, x, lda,
                                 y, ldb, z, ldc))
        return;
      cblas_sgemm(CblasRowMajor, la.trans, lb.trans, M, N, K, 1.0f, x, lda, y, ldb, 0.0f, z, ldc);
    } else
      cblas_dgemm(CblasRowMajor, la.trans, lb.trans, M, N, K, 1.0, x, lda, y, ldb, 0.0, z, ldc);
  };
  if (batch_threaded) {
    // Many small products: one thread per chunk of the batch. OpenBLAS sees it is inside an
    // OpenMP region and stays single-threaded, so nothing nests.
    parallel_for(nb, std::max<std::int64_t>(1, kGemmGrain / std::max<std::int64_t>(work, 1)),
                 [&](std::int64_t b0, std::int64_t b1) {
                   for (std::int64_t i = b0; i < b1; ++i) one(i);
                 });
  } else {
    BlasThreads threads(call_threads);  // the library threads each product itself
    for (std::int64_t i = 0; i < nb; ++i) one(i);
  }
}

// f32 matmul under bf16 autocast (include/soma/autocast.hpp): each product through oneDNN on
// bf16-rounded operands with f32 accumulation. False (nothing written) when oneDNN refuses the
// shape; the caller then runs f32 BLAS. Small work stays on the calling thread, as for BLAS.
bool gemm_batched_bf16(Tensor a, Tensor b, const Tensor& c, const Shape& batch) {
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const std::size_t ra = std::size_t(a.rank()), rb = std::size_t(b.rank());
  // oneDNN takes any positive strides; a dim of extent 1 gets a harmless one, and zero or
  // negative strides (broadcast or flipped views) are packed first.
  auto fix = [](std::int64_t ext, std::int64_t st, std::int64_t other) {
    return ext <= 1 ? std::max<std::int64_t>(other, 1) : st;
  };
  std::int64_t ars = fix(m, a.strides()[ra - 2], k), acs = fix(k, a.strides()[ra - 1], 1);
  if (ars <= 0 || acs <= 0) {
    a = packed_copy(a, DType::f32);
    ars = std::max<std::int64_t>(k, 1), acs = 1;
  }
  std::int64_t brs = fix(k, b.strides()[rb - 2], n), bcs = fix(n, b.strides()[rb - 1], 1);
  if (brs <= 0 || bcs <= 0) {
    b = packed_copy(b, DType::f32);
    brs = std::max<std::int64_t>(n, 1), bcs = 1;
  }
  std::vector<std::int64_t> oa, ob;
  batch_offsets(a, batch, oa);
  batch_offsets(b, batch, ob);
  const MatmulGeometry g{m, n, k, ars, acs, brs, bcs};
  const std::int64_t nb = numel(batch);
  BlasThreads threads(threads_for(m * n * k, kGemmGrain));
  for (std::int64_t i = 0; i < nb; ++i)
    if (!onednn_matmul_bf16(g, a.data<float>() + oa[std::size_t(i)],
                            b.data<float>() + ob[std::size_t(i)], c.data<float>() + i * m * n))
      return false;  // refused at the first product (the cache remembers), so none was written
  return true;
}

void matmul_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &a0 = in[0], &b0 = in[1];
  // NumPy's promotion of 1-d operands: [k] is a [1, k] row on the left, a [k, 1] column on the
  // right. The stride along the added dim is never used.
  Tensor a = a0.rank() == 1 ? Tensor::view_of(a0, {1, a0.dim(0)}, {0, a0.strides()[0]}, a0.offset())
                            : a0;
  Tensor b = b0.rank() == 1 ? Tensor::view_of(b0, {b0.dim(0), 1}, {b0.strides()[0], 0}, b0.offset())
                            : b0;
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape full = batch;
  full.push_back(m);
  full.push_back(n);
  Tensor c = Tensor::view_of(out[0], full, contiguous_strides(full), out[0].offset());
  if (c.numel() == 0) return;
  if (k == 0) {  // an empty sum
    fill_value(c, 0.0);
    return;
  }
  for (std::int64_t v : {m, n, k})
    if (v > INT_MAX) fail("matmul", "dimension ", v, " is too large for BLAS (", shape_str(a0.shape()), " x ", shape_str(b0.shape()), ")");
  const DType t = a.dtype();
  switch (t) {
    case DType::f32:
      if (cpu_autocast_dtype() == DType::bf16 && gemm_batched_bf16(a, b, c, batch)) break;
      gemm_batched<float>(a, b, c, batch);
      break;
    case DType::f64: gemm_batched<double>(a, b, c, batch); break;
    case DType::f16:
    case DType::bf16: {
      Tensor cf = Tensor::empty(full, DType::f32, c.device());
      gemm_batched<float>(packed_copy(a, DType::f32), packed_copy(b, DType::f32), cf, batch);
      copy_into(cf, c);
      break;
    }
    case DType::i32: matmul_loop<std::int32_t>(a, b, c, batch); break;
    case DType::i64: matmul_loop<std::int64_t>(a, b, c, batch); break;
    case DType::u8: matmul_loop<std::uint8_t>(a, b, c, batch); break;
    case DType::i8: matmul_loop<std::int8_t>(a, b, c, batch); break;
    case DType::boolean: fail("matmul", "dtype bool is not supported (cast to a numeric dtype first)");
  }
}

}  // namespace

void register_cpu_linalg_kernels() {
  register_kernel("matmul", DeviceKind::CPU, matmul_kernel);
  register_cpu_lapack_kernels();
}

}  // namespace soma::detail
