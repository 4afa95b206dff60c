// f64 references of the LAPACK-backed linalg ops (see references_linalg.hpp for the conventions).
#include "references_linalg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::ref {
namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
using Vec = std::vector<double>;

// The matrices of a [..., m, n] tensor, each row-major.
struct Batch {
  Shape lead;
  std::int64_t m = 0, n = 0, count = 0;
  Vec v;
  const double* mat(std::int64_t b) const { return v.data() + b * m * n; }
};
Batch batch_of(const Tensor& t, const char* op) {
  if (t.rank() < 2) fail(op, "expected a [..., m, n] tensor, got shape ", shape_str(t.shape()));
  Batch b;
  b.lead.assign(t.shape().begin(), t.shape().end() - 2);
  b.m = t.dim(-2);
  b.n = t.dim(-1);
  b.count = numel(b.lead);
  b.v = t.to_vector<double>();
  return b;
}
void need_square(const Batch& b, const char* op) {
  if (b.m != b.n) fail(op, "expected square matrices, got ", b.m, "x", b.n);
}
Shape with(Shape lead, std::initializer_list<std::int64_t> tail) {
  lead.insert(lead.end(), tail.begin(), tail.end());
  return lead;
}
bool finite(const double* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}
bool lower_finite(const double* a, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j <= i; ++j)
      if (!std::isfinite(a[i * n + j])) return false;
  return true;
}

// Gaussian elimination with partial pivoting of [a | b] (a n x n, b n x k, row-major, in
// place): b becomes a^-1 b. Returns the determinant (0 for an exactly singular a).
double eliminate(Vec& a, Vec& b, std::int64_t n, std::int64_t k) {
  double det = 1;
  for (std::int64_t c = 0; c < n; ++c) {
    std::int64_t p = c;
    for (std::int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    if (a[p * n + c] == 0) return 0;
    if (p != c) {
      for (std::int64_t j = 0; j < n; ++j) std::swap(a[p * n + j], a[c * n + j]);
      for (std::int64_t j = 0; j < k; ++j) std::swap(b[p * k + j], b[c * k + j]);
      det = -det;
    }
    det *= a[c * n + c];
    for (std::int64_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r * n + c] / a[c * n + c];
      if (f == 0) continue;
      for (std::int64_t j = c; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
      for (std::int64_t j = 0; j < k; ++j) b[r * k + j] -= f * b[c * k + j];
    }
  }
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < k; ++j) b[r * k + j] /= a[r * n + r];
  return det;
}

// Flips column j of the row-major x (rows x cols) when its largest-magnitude entry is negative;
// returns whether it flipped.
bool normalize_column(Vec& x, std::int64_t rows, std::int64_t cols, std::int64_t j) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < rows; ++i)
    if (std::abs(x[i * cols + j]) > std::abs(x[best * cols + j])) best = i;
  if (rows == 0 || x[best * cols + j] >= 0) return false;
  for (std::int64_t i = 0; i < rows; ++i) x[i * cols + j] = -x[i * cols + j];
  return true;
}

// Cyclic Jacobi on the symmetric s (n x n, row-major): eigenvalues w (unsorted) and
// eigenvectors as the columns of v.
void jacobi_eigen(Vec s, std::int64_t n, Vec& w, Vec& v) {
  v.assign(std::size_t(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) v[i * n + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        total += s[i * n + j] * s[i * n + j];
        if (i != j) off += s[i * n + j] * s[i * n + j];
      }
    if (off <= 1e-32 * total || off == 0) break;
    for (std::int64_t p = 0; p < n; ++p)
      for (std::int64_t q = p + 1; q < n; ++q) {
        const double apq = s[p * n + q];
        if (apq == 0) continue;
        const double theta = (s[q * n + q] - s[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), sn = t * c;
        for (std::int64_t k = 0; k < n; ++k) {  // s = s J (columns p, q)
          const double skp = s[k * n + p], skq = s[k * n + q];
          s[k * n + p] = c * skp - sn * skq;
          s[k * n + q] = sn * skp + c * skq;
        }
        for (std::int64_t k = 0; k < n; ++k) {  // s = J^T s (rows p, q)
          const double spk = s[p * n + k], sqk = s[q * n + k];
          s[p * n + k] = c * spk - sn * sqk;
          s[q * n + k] = sn * spk + c * sqk;
        }
        for (std::int64_t k = 0; k < n; ++k) {
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - sn * vkq;
          v[k * n + q] = sn * vkp + c * vkq;
        }
      }
  }
  w.resize(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i) w[i] = s[i * n + i];
}

// One-sided Jacobi SVD of a (m x n, m >= n, row-major): u (m x n), s (n), v (n x n), with
// singular values in no particular order.
void jacobi_svd(Vec a, std::int64_t m, std::int64_t n, Vec& u, Vec& s, Vec& v) {
  v.assign(std::size_t(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) v[i * n + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (std::int64_t p = 0; p < n; ++p)
      for (std::int64_t q = p + 1; q < n; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (std::int64_t i = 0; i < m; ++i) {
          alpha += a[i * n + p] * a[i * n + p];
          beta += a[i * n + q] * a[i * n + q];
          gamma += a[i * n + p] * a[i * n + q];
        }
        if (std::abs(gamma) <= 1e-17 * std::sqrt(alpha * beta) || gamma == 0) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), sn = c * t;
        for (std::int64_t i = 0; i < m; ++i) {
          const double x = a[i * n + p], y = a[i * n + q];
          a[i * n + p] = c * x - sn * y;
          a[i * n + q] = sn * x + c * y;
        }
        for (std::int64_t i = 0; i < n; ++i) {
          const double x = v[i * n + p], y = v[i * n + q];
          v[i * n + p] = c * x - sn * y;
          v[i * n + q] = sn * x + c * y;
        }
      }
    if (!rotated) break;
  }
  s.assign(std::size_t(n), 0.0);
  u.assign(std::size_t(m * n), 0.0);
  for (std::int64_t j = 0; j < n; ++j) {
    double nrm = 0;
    for (std::int64_t i = 0; i < m; ++i) nrm += a[i * n + j] * a[i * n + j];
    s[j] = std::sqrt(nrm);
    for (std::int64_t i = 0; i < m; ++i) u[i * n + j] = s[j] > 0 ? a[i * n + j] / s[j] : 0;
  }
}

}  // namespace

std::vector<Tensor> linalg_solve(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_solve"), b = batch_of(in[1], "linalg_solve");
  need_square(a, "linalg_solve");
  const std::int64_t n = a.n, k = b.n;
  Vec out(b.v.size());
  for (std::int64_t i = 0; i < a.count; ++i) {
    Vec am(a.mat(i), a.mat(i) + n * n), bm(b.mat(i), b.mat(i) + n * k);
    if (!finite(am.data(), n * n) || !finite(bm.data(), n * k)) {
      std::fill(bm.begin(), bm.end(), kNan);
    } else if (eliminate(am, bm, n, k) == 0) {
      fail("linalg_solve", "matrix ", i, " of the batch is singular");
    }
    std::copy(bm.begin(), bm.end(), out.begin() + i * n * k);
  }
  return {constant(out, in[1].shape())};
}

std::vector<Tensor> linalg_inv(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_inv");
  need_square(a, "linalg_inv");
  const std::int64_t n = a.n;
  Vec out(a.v.size());
  for (std::int64_t i = 0; i < a.count; ++i) {
    Vec am(a.mat(i), a.mat(i) + n * n), bm(std::size_t(n * n), 0.0);
    for (std::int64_t r = 0; r < n; ++r) bm[r * n + r] = 1;
    if (!finite(am.data(), n * n)) std::fill(bm.begin(), bm.end(), kNan);
    else if (eliminate(am, bm, n, n) == 0) fail("linalg_inv", "matrix ", i, " is singular");
    std::copy(bm.begin(), bm.end(), out.begin() + i * n * n);
  }
  return {constant(out, in[0].shape())};
}

namespace {
double det_of(const Batch& a, std::int64_t i) {
  const std::int64_t n = a.n;
  if (!finite(a.mat(i), n * n)) return kNan;
  Vec am(a.mat(i), a.mat(i) + n * n), none;
  return eliminate(am, none, n, 0);
}
}  // namespace

std::vector<Tensor> linalg_det(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_det");
  need_square(a, "linalg_det");
  Vec out(std::size_t(a.count));
  for (std::int64_t i = 0; i < a.count; ++i) out[i] = det_of(a, i);
  return {constant(out, a.lead)};
}

std::vector<Tensor> linalg_slogdet(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_slogdet");
  need_square(a, "linalg_slogdet");
  Vec sign(std::size_t(a.count)), logabs(std::size_t(a.count));
  for (std::int64_t i = 0; i < a.count; ++i) {
    const double d = det_of(a, i);
    sign[i] = std::isnan(d) ? kNan : d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
    logabs[i] = std::log(std::abs(d));
  }
  return {constant(sign, a.lead), constant(logabs, a.lead)};
}

std::vector<Tensor> linalg_cholesky(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_cholesky");
  need_square(a, "linalg_cholesky");
  const std::int64_t n = a.n;
  Vec out(a.v.size(), 0.0);
  for (std::int64_t b = 0; b < a.count; ++b) {
    const double* s = a.mat(b);
    double* l = out.data() + b * n * n;
    if (!lower_finite(s, n)) {
      std::fill(l, l + n * n, kNan);
      continue;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      double d = s[j * n + j];
      for (std::int64_t k = 0; k < j; ++k) d -= l[j * n + k] * l[j * n + k];
      if (!(d > 0)) fail("linalg_cholesky", "matrix ", b, " is not positive definite");
      l[j * n + j] = std::sqrt(d);
      for (std::int64_t i = j + 1; i < n; ++i) {
        double x = s[i * n + j];
        for (std::int64_t k = 0; k < j; ++k) x -= l[i * n + k] * l[j * n + k];
        l[i * n + j] = x / l[j * n + j];
      }
    }
  }
  return {constant(out, in[0].shape())};
}

std::vector<Tensor> linalg_qr(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_qr");
  const std::int64_t m = a.m, n = a.n, k = std::min(m, n);
  Vec qs(std::size_t(a.count * m * k)), rs(std::size_t(a.count * k * n), 0.0);
  for (std::int64_t b = 0; b < a.count; ++b) {
    const double* x = a.mat(b);
    double* q = qs.data() + b * m * k;
    double* r = rs.data() + b * k * n;
    if (!finite(x, m * n)) {
      std::fill(q, q + m * k, kNan);
      std::fill(r, r + k * n, kNan);
      continue;
    }
    // Gram-Schmidt, each column orthogonalised twice (the second pass mops up the rounding).
    for (std::int64_t j = 0; j < k; ++j) {
      Vec v(static_cast<std::size_t>(m));
      for (std::int64_t i = 0; i < m; ++i) v[i] = x[i * n + j];
      for (int pass = 0; pass < 2; ++pass)
        for (std::int64_t p = 0; p < j; ++p) {
          double d = 0;
          for (std::int64_t i = 0; i < m; ++i) d += q[i * k + p] * v[i];
          r[p * n + j] += d;
          for (std::int64_t i = 0; i < m; ++i) v[i] -= d * q[i * k + p];
        }
      double nrm = 0;
      for (double e : v) nrm += e * e;
      nrm = std::sqrt(nrm);
      r[j * n + j] = nrm;
      for (std::int64_t i = 0; i < m; ++i) q[i * k + j] = v[i] / nrm;
    }
    for (std::int64_t j = k; j < n; ++j)  // wide A: the rest of R is Q^T A
      for (std::int64_t p = 0; p < k; ++p) {
        double d = 0;
        for (std::int64_t i = 0; i < m; ++i) d += q[i * k + p] * x[i * n + j];
        r[p * n + j] = d;
      }
  }
  return {constant(qs, with(a.lead, {m, k})), constant(rs, with(a.lead, {k, n}))};
}

std::vector<Tensor> linalg_svd(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_svd");
  const std::int64_t m = a.m, n = a.n, k = std::min(m, n);
  Vec us(std::size_t(a.count * m * k)), ss(std::size_t(a.count * k)), vhs(std::size_t(a.count * k * n));
  for (std::int64_t b = 0; b < a.count; ++b) {
    const double* x = a.mat(b);
    if (!finite(x, m * n)) {
      std::fill(us.begin() + b * m * k, us.begin() + (b + 1) * m * k, kNan);
      std::fill(ss.begin() + b * k, ss.begin() + (b + 1) * k, kNan);
      std::fill(vhs.begin() + b * k * n, vhs.begin() + (b + 1) * k * n, kNan);
      continue;
    }
    Vec u, s, v;  // u: m x k, v: n x k
    if (m >= n) {
      jacobi_svd(Vec(x, x + m * n), m, n, u, s, v);
    } else {  // A^T = V S U^T
      Vec t(std::size_t(m * n));
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) t[j * m + i] = x[i * n + j];
      jacobi_svd(t, n, m, v, s, u);
    }
    std::vector<std::int64_t> order(static_cast<std::size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto p, auto q) { return s[p] > s[q]; });
    Vec uo(std::size_t(m * k)), vo(std::size_t(n * k));
    for (std::int64_t j = 0; j < k; ++j) {
      ss[b * k + j] = s[order[j]];
      for (std::int64_t i = 0; i < m; ++i) uo[i * k + j] = u[i * k + order[j]];
      for (std::int64_t i = 0; i < n; ++i) vo[i * k + j] = v[i * k + order[j]];
    }
    for (std::int64_t j = 0; j < k; ++j)
      if (normalize_column(uo, m, k, j))
        for (std::int64_t i = 0; i < n; ++i) vo[i * k + j] = -vo[i * k + j];
    std::copy(uo.begin(), uo.end(), us.begin() + b * m * k);
    for (std::int64_t j = 0; j < k; ++j)
      for (std::int64_t i = 0; i < n; ++i) vhs[b * k * n + j * n + i] = vo[i * k + j];
  }
  return {constant(us, with(a.lead, {m, k})), constant(ss, with(a.lead, {k})),
          constant(vhs, with(a.lead, {k, n}))};
}

std::vector<Tensor> linalg_eigh(const std::vector<Tensor>& in, const Attrs&) {
  const Batch a = batch_of(in[0], "linalg_eigh");
  need_square(a, "linalg_eigh");
  const std::int64_t n = a.n;
  Vec ws(std::size_t(a.count * n)), vs(std::size_t(a.count * n * n));
  for (std::int64_t b = 0; b < a.count; ++b) {
    const double* x = a.mat(b);
    if (!lower_finite(x, n)) {
      std::fill(ws.begin() + b * n, ws.begin() + (b + 1) * n, kNan);
      std::fill(vs.begin() + b * n * n, vs.begin() + (b + 1) * n * n, kNan);
      continue;
    }
    Vec s(std::size_t(n * n));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j <= i; ++j) s[i * n + j] = s[j * n + i] = x[i * n + j];
    Vec w, v;
    jacobi_eigen(s, n, w, v);
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto p, auto q) { return w[p] < w[q]; });
    Vec vo(std::size_t(n * n));
    for (std::int64_t j = 0; j < n; ++j) {
      ws[b * n + j] = w[order[j]];
      for (std::int64_t i = 0; i < n; ++i) vo[i * n + j] = v[i * n + order[j]];
    }
    for (std::int64_t j = 0; j < n; ++j) normalize_column(vo, n, n, j);
    std::copy(vo.begin(), vo.end(), vs.begin() + b * n * n);
  }
  return {constant(ws, with(a.lead, {n})), constant(vs, in[0].shape())};
}

}  // namespace soma::ref
