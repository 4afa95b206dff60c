// CPU kernels of the LAPACK-backed linalg ops (src/ops/linalg_lapack.cpp) through LAPACKE
// (Debian: liblapacke-dev, over OpenBLAS's LAPACK). Each matrix of the batch is packed
// column-major into scratch buffers, handed to LAPACK, and written back row-major into the
// outputs (which call_op allocates packed). A matrix with a NaN or inf gets NaN outputs without
// reaching LAPACK (LAPACKE refuses NaN arguments, and the iterative drivers may not converge on
// them); a singular or non-positive-definite matrix is a soma::Error naming the op, the matrix's
// batch index and what was expected. The batch runs serially: the matrices are small and an
// error must not be thrown from inside a parallel region.
#include <climits>
#include <cmath>
#include <complex>
#include <limits>
#include <vector>
#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>

#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

using Int = lapack_int;

template <class T> struct Lapack;
template <> struct Lapack<double> {
  static Int gesv(Int n, Int k, double* a, Int* ipiv, double* b) {
    return LAPACKE_dgesv(LAPACK_COL_MAJOR, n, k, a, n, ipiv, b, n);
  }
  static Int getrf(Int n, double* a, Int* ipiv) {
    return LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, a, n, ipiv);
  }
  static Int potrf(Int n, double* a) { return LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, a, n); }
  static Int geqrf(Int m, Int n, double* a, double* tau) {
    return LAPACKE_dgeqrf(LAPACK_COL_MAJOR, m, n, a, m, tau);
  }
  static Int orgqr(Int m, Int k, double* a, const double* tau) {
    return LAPACKE_dorgqr(LAPACK_COL_MAJOR, m, k, k, a, m, tau);
  }
  static Int gesvd(Int m, Int n, double* a, double* s, double* u, double* vt, double* superb) {
    const Int k = std::min(m, n);
    return LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'S', 'S', m, n, a, m, s, u, m, vt, k, superb);
  }
  static Int syevd(Int n, double* a, double* w) {
    return LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a, n, w);
  }
};
template <> struct Lapack<float> {
  static Int gesv(Int n, Int k, float* a, Int* ipiv, float* b) {
    return LAPACKE_sgesv(LAPACK_COL_MAJOR, n, k, a, n, ipiv, b, n);
  }
  static Int getrf(Int n, float* a, Int* ipiv) {
    return LAPACKE_sgetrf(LAPACK_COL_MAJOR, n, n, a, n, ipiv);
  }
  static Int potrf(Int n, float* a) { return LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', n, a, n); }
  static Int geqrf(Int m, Int n, float* a, float* tau) {
    return LAPACKE_sgeqrf(LAPACK_COL_MAJOR, m, n, a, m, tau);
  }
  static Int orgqr(Int m, Int k, float* a, const float* tau) {
    return LAPACKE_sorgqr(LAPACK_COL_MAJOR, m, k, k, a, m, tau);
  }
  static Int gesvd(Int m, Int n, float* a, float* s, float* u, float* vt, float* superb) {
    const Int k = std::min(m, n);
    return LAPACKE_sgesvd(LAPACK_COL_MAJOR, 'S', 'S', m, n, a, m, s, u, m, vt, k, superb);
  }
  static Int syevd(Int n, float* a, float* w) {
    return LAPACKE_ssyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a, n, w);
  }
};

// The matrices of one [..., m, n] input: packed, with their count and size.
template <class T> struct Matrices {
  Tensor packed;
  const T* base = nullptr;
  std::int64_t count = 0, m = 0, n = 0;
  Matrices(const Tensor& t, const char* op) : packed(t.contiguous()) {
    m = t.dim(-2);
    n = t.dim(-1);
    count = m * n == 0 ? numel(Shape(t.shape().begin(), t.shape().end() - 2)) : t.numel() / (m * n);
    if (m > INT_MAX || n > INT_MAX)
      fail(op, "a ", m, "x", n, " matrix is beyond LAPACK's 32-bit sizes");
    base = t.numel() ? packed.data<T>() : nullptr;
  }
  const T* mat(std::int64_t b) const { return base + b * m * n; }
};

std::string batch_str(const Tensor& t) {
  return shape_str(Shape(t.shape().begin(), t.shape().end() - 2));
}

// Row-major x (m x n) into the column-major buf, and back.
template <class T> void load(const T* x, std::int64_t m, std::int64_t n, std::vector<T>& buf) {
  buf.resize(std::size_t(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) buf[std::size_t(i + j * m)] = x[i * n + j];
}
template <class T> void store(const T* buf, std::int64_t m, std::int64_t n, T* y) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) y[i * n + j] = buf[i + j * m];
}
template <class T> bool finite(const T* x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}
template <class T> bool lower_finite(const T* x, std::int64_t n) {  // row-major, i >= j
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j <= i; ++j)
      if (!std::isfinite(x[i * n + j])) return false;
  return true;
}
template <class T> void fill_nan(T* y, std::int64_t count) {
  std::fill(y, y + count, std::numeric_limits<T>::quiet_NaN());
}
// Flips the column (contiguous, `rows` long) when its largest-magnitude entry is negative.
template <class T> bool normalize_column(T* c, std::int64_t rows) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < rows; ++i)
    if (std::abs(c[i]) > std::abs(c[best])) best = i;
  if (rows == 0 || c[best] >= 0) return false;
  for (std::int64_t i = 0; i < rows; ++i) c[i] = -c[i];
  return true;
}

template <class T> void solve_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_solve"), b(in[1], "linalg_solve");
  const std::int64_t n = a.n, k = b.n;
  T* y = out[0].data<T>();
  if (n == 0 || k == 0) return;
  std::vector<T> abuf, bbuf;
  std::vector<Int> ipiv(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < a.count; ++i) {
    if (!finite(a.mat(i), n * n) || !finite(b.mat(i), n * k)) {
      fill_nan(y + i * n * k, n * k);
      continue;
    }
    load(a.mat(i), n, n, abuf);
    load(b.mat(i), n, k, bbuf);
    const Int info = Lapack<T>::gesv(Int(n), Int(k), abuf.data(), ipiv.data(), bbuf.data());
    if (info > 0)
      fail("linalg_solve", "matrix ", i, " of the batch ", batch_str(in[0]),
           " is singular: U(", info, ",", info, ") of its LU factorisation is exactly zero "
           "(expected an invertible A)");
    if (info < 0) fail("linalg_solve", "LAPACK ?gesv rejected argument ", -info);
    store(bbuf.data(), n, k, y + i * n * k);
  }
}

template <class T> void inv_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_inv");
  const std::int64_t n = a.n;
  T* y = out[0].data<T>();
  if (n == 0) return;
  std::vector<T> abuf, bbuf;
  std::vector<Int> ipiv(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < a.count; ++i) {
    if (!finite(a.mat(i), n * n)) {
      fill_nan(y + i * n * n, n * n);
      continue;
    }
    load(a.mat(i), n, n, abuf);
    bbuf.assign(std::size_t(n * n), T(0));
    for (std::int64_t r = 0; r < n; ++r) bbuf[std::size_t(r * n + r)] = T(1);
    const Int info = Lapack<T>::gesv(Int(n), Int(n), abuf.data(), ipiv.data(), bbuf.data());
    if (info > 0)
      fail("linalg_inv", "matrix ", i, " of the batch ", batch_str(in[0]),
           " is singular: U(", info, ",", info, ") of its LU factorisation is exactly zero "
           "(expected an invertible matrix)");
    if (info < 0) fail("linalg_inv", "LAPACK ?gesv rejected argument ", -info);
    store(bbuf.data(), n, n, y + i * n * n);
  }
}

// The sign and log |det| of each matrix from its LU factorisation (sign 0, log -inf: singular;
// both NaN: a NaN or inf in the matrix).
template <class T>
void sign_logdet(const Tensor& t, const char* op, std::vector<double>& sign, std::vector<double>& logabs) {
  Matrices<T> a(t, op);
  const std::int64_t n = a.n;
  sign.assign(std::size_t(a.count), 1.0);
  logabs.assign(std::size_t(a.count), 0.0);
  if (n == 0) return;  // the empty product
  std::vector<T> abuf;
  std::vector<Int> ipiv(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < a.count; ++i) {
    if (!finite(a.mat(i), n * n)) {
      sign[i] = logabs[i] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    load(a.mat(i), n, n, abuf);
    const Int info = Lapack<T>::getrf(Int(n), abuf.data(), ipiv.data());
    if (info < 0) fail(op, "LAPACK ?getrf rejected argument ", -info);
    if (info > 0) {  // an exact zero pivot: det = 0
      sign[i] = 0;
      logabs[i] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double s = 1, l = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const double u = double(abuf[std::size_t(r * n + r)]);
      if (u < 0) s = -s;
      if (ipiv[std::size_t(r)] != Int(r + 1)) s = -s;
      l += std::log(std::abs(u));
    }
    sign[i] = s;
    logabs[i] = l;
  }
}

template <class T> void det_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  std::vector<double> sign, logabs;
  sign_logdet<T>(in[0], "linalg_det", sign, logabs);
  T* y = out[0].data<T>();
  for (std::size_t i = 0; i < sign.size(); ++i) y[i] = T(sign[i] * std::exp(logabs[i]));
}

template <class T> void slogdet_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  std::vector<double> sign, logabs;
  sign_logdet<T>(in[0], "linalg_slogdet", sign, logabs);
  T *s = out[0].data<T>(), *l = out[1].data<T>();
  for (std::size_t i = 0; i < sign.size(); ++i) {
    s[i] = T(sign[i]);
    l[i] = T(logabs[i]);
  }
}

template <class T> void cholesky_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_cholesky");
  const std::int64_t n = a.n;
  T* y = out[0].data<T>();
  if (n == 0) return;
  std::vector<T> buf;
  for (std::int64_t i = 0; i < a.count; ++i) {
    T* l = y + i * n * n;
    if (!lower_finite(a.mat(i), n)) {
      fill_nan(l, n * n);
      continue;
    }
    load(a.mat(i), n, n, buf);
    const Int info = Lapack<T>::potrf(Int(n), buf.data());
    if (info > 0)
      fail("linalg_cholesky", "matrix ", i, " of the batch ", batch_str(in[0]),
           " is not positive definite: its leading minor of order ", info,
           " is not positive (expected a symmetric positive definite matrix; only the lower "
           "triangle is read)");
    if (info < 0) fail("linalg_cholesky", "LAPACK ?potrf rejected argument ", -info);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < n; ++c) l[r * n + c] = c <= r ? buf[std::size_t(r + c * n)] : T(0);
  }
}

template <class T> void qr_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_qr");
  const std::int64_t m = a.m, n = a.n, k = std::min(m, n);
  T *qo = out[0].data<T>(), *ro = out[1].data<T>();
  if (k == 0) return;
  std::vector<T> buf, tau(static_cast<std::size_t>(k)), r(static_cast<std::size_t>(k * n));
  for (std::int64_t i = 0; i < a.count; ++i) {
    T *q = qo + i * m * k, *ri = ro + i * k * n;
    if (!finite(a.mat(i), m * n)) {
      fill_nan(q, m * k);
      fill_nan(ri, k * n);
      continue;
    }
    load(a.mat(i), m, n, buf);
    Int info = Lapack<T>::geqrf(Int(m), Int(n), buf.data(), tau.data());
    if (info < 0) fail("linalg_qr", "LAPACK ?geqrf rejected argument ", -info);
    for (std::int64_t p = 0; p < k; ++p)  // R, row-major, from the upper triangle
      for (std::int64_t c = 0; c < n; ++c) r[std::size_t(p * n + c)] = c >= p ? buf[std::size_t(p + c * m)] : T(0);
    info = Lapack<T>::orgqr(Int(m), Int(k), buf.data(), tau.data());
    if (info < 0) fail("linalg_qr", "LAPACK ?orgqr rejected argument ", -info);
    // R's diagonal made non-negative: row p of R and column p of Q change sign together.
    for (std::int64_t p = 0; p < k; ++p)
      if (r[std::size_t(p * n + p)] < 0) {
        for (std::int64_t c = 0; c < n; ++c) r[std::size_t(p * n + c)] = -r[std::size_t(p * n + c)];
        for (std::int64_t s = 0; s < m; ++s) buf[std::size_t(s + p * m)] = -buf[std::size_t(s + p * m)];
      }
    store(buf.data(), m, k, q);
    std::copy(r.begin(), r.end(), ri);
  }
}

template <class T> void svd_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_svd");
  const std::int64_t m = a.m, n = a.n, k = std::min(m, n);
  T *uo = out[0].data<T>(), *so = out[1].data<T>(), *vo = out[2].data<T>();
  if (k == 0) return;
  std::vector<T> buf, u(std::size_t(m * k)), vt(std::size_t(k * n)),
      superb(std::size_t(std::max<std::int64_t>(k, 2)));
  for (std::int64_t i = 0; i < a.count; ++i) {
    T *ui = uo + i * m * k, *si = so + i * k, *vi = vo + i * k * n;
    if (!finite(a.mat(i), m * n)) {
      fill_nan(ui, m * k);
      fill_nan(si, k);
      fill_nan(vi, k * n);
      continue;
    }
    load(a.mat(i), m, n, buf);
    const Int info = Lapack<T>::gesvd(Int(m), Int(n), buf.data(), si, u.data(), vt.data(), superb.data());
    if (info > 0)
      fail("linalg_svd", "matrix ", i, " of the batch ", batch_str(in[0]), ": the SVD did not "
           "converge (", info, " superdiagonals of the bidiagonal form left; expected a finite, "
           "reasonably scaled matrix)");
    if (info < 0) fail("linalg_svd", "LAPACK ?gesvd rejected argument ", -info);
    for (std::int64_t j = 0; j < k; ++j)  // u_j's largest entry positive; v_j flips with it
      if (normalize_column(u.data() + j * m, m))
        for (std::int64_t c = 0; c < n; ++c) vt[std::size_t(j + c * k)] = -vt[std::size_t(j + c * k)];
    store(u.data(), m, k, ui);
    store(vt.data(), k, n, vi);
  }
}

template <class T> void eigh_impl(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Matrices<T> a(in[0], "linalg_eigh");
  const std::int64_t n = a.n;
  T *wo = out[0].data<T>(), *vo = out[1].data<T>();
  if (n == 0) return;
  std::vector<T> buf;
  for (std::int64_t i = 0; i < a.count; ++i) {
    T *w = wo + i * n, *v = vo + i * n * n;
    if (!lower_finite(a.mat(i), n)) {
      fill_nan(w, n);
      fill_nan(v, n * n);
      continue;
    }
    load(a.mat(i), n, n, buf);
    const Int info = Lapack<T>::syevd(Int(n), buf.data(), w);
    if (info > 0)
      fail("linalg_eigh", "matrix ", i, " of the batch ", batch_str(in[0]),
           ": the eigensolver did not converge (LAPACK ?syevd info ", info, ")");
    if (info < 0) fail("linalg_eigh", "LAPACK ?syevd rejected argument ", -info);
    for (std::int64_t j = 0; j < n; ++j) normalize_column(buf.data() + j * n, n);
    store(buf.data(), n, n, v);
  }
}

// f32 or f64 (the shape rules refuse the rest).
#define SOMA_LAPACK_KERNEL(NAME)                                                          \
  void NAME##_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) { \
    if (in[0].dtype() == DType::f64)                                                      \
      NAME##_impl<double>(in, out);                                                       \
    else                                                                                  \
      NAME##_impl<float>(in, out);                                                        \
  }
SOMA_LAPACK_KERNEL(solve)
SOMA_LAPACK_KERNEL(inv)
SOMA_LAPACK_KERNEL(det)
SOMA_LAPACK_KERNEL(slogdet)
SOMA_LAPACK_KERNEL(cholesky)
SOMA_LAPACK_KERNEL(qr)
SOMA_LAPACK_KERNEL(svd)
SOMA_LAPACK_KERNEL(eigh)
#undef SOMA_LAPACK_KERNEL

}  // namespace

void register_cpu_lapack_kernels() {
  register_kernel("linalg_solve", DeviceKind::CPU, solve_kernel);
  register_kernel("linalg_inv", DeviceKind::CPU, inv_kernel);
  register_kernel("linalg_det", DeviceKind::CPU, det_kernel);
  register_kernel("linalg_slogdet", DeviceKind::CPU, slogdet_kernel);
  register_kernel("linalg_cholesky", DeviceKind::CPU, cholesky_kernel);
  register_kernel("linalg_qr", DeviceKind::CPU, qr_kernel);
  register_kernel("linalg_svd", DeviceKind::CPU, svd_kernel);
  register_kernel("linalg_eigh", DeviceKind::CPU, eigh_kernel);
}

}  // namespace soma::detail
