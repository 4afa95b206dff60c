// CPU kernels for scaled_dot_product_attention and its gradient (src/ops/attention.cpp).
//
// FlashAttention on the CPU: per (batch, head) and block of queries, the keys are visited in
// blocks; the forward keeps a running row maximum m, sum l and unnormalised output (online
// softmax: when m grows, l and the output are rescaled by exp(m_old - m_new)), and writes
// lse = m + log(l). The backward recomputes each block of logits, P = exp(logits - lse) and
//   dS = P * (dout v^T - rowsum(dout * out) + dlse),  dq += scale dS k,  dk += scale dS^T q,
//   dv += P^T dout.
// Memory is the outputs plus two [block_q, block_k] tiles per thread: O(seq * d), never
// O(seq_q * seq_k) (except the logits' gradient, which the backward writes only when an additive
// mask needs its gradient). The block products are OpenBLAS GEMMs, one thread each.
// f32 and f64 natively; f16/bf16 through f32.
// Threads: the forward over (batch*heads x query blocks); the backward in two passes, dk and dv
// over (batch*heads x key blocks), then dq over (batch*heads x query blocks), so that no two
// threads write one row (each pass recomputes P: 7 block products where one pass needs 5).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "internal/copy.hpp"
#include "internal/parallel.hpp"
#include "internal/vector_math.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

#define SOMA_ISA_FILE "backend/cpu/attention.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
SOMA_ISA_BEGIN
namespace {

constexpr std::int64_t kBlockQ = 128, kBlockK = 128;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

Tensor packed(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), dtype, t.device());
  copy_into(t, p);
  return p;
}

// An output in the work dtype: the output itself, or a temporary copied back by finish().
struct WorkOut {
  Tensor target, work;
  WorkOut(const Tensor& out, DType wt)
      : target(out),
        work(out.dtype() == wt && out.is_contiguous() ? out : Tensor::empty(out.shape(), wt)) {}
  void finish() const {
    if (work.impl_ptr() != target.impl_ptr()) copy_into(work, target);
  }
};

// Geometry and the mask's broadcast strides over [B, H, Sq, Sk] (0 along broadcast axes).
struct Geom {
  std::int64_t B, H, Sq, Sk, D, Dv;
  double scale;
  bool causal;
  bool has_mask = false, bool_mask = false;
  std::int64_t ms[4] = {0, 0, 0, 0};
};

Geom geometry(const std::vector<Tensor>& in, std::size_t mask_input, const Attrs& a) {
  const Shape& q = in[0].shape();
  Geom g{q[0], q[1], q[2], in[1].shape()[2], q[3], in[2].shape()[3], 0.0, false};
  g.causal = a.has("causal") && a.b("causal");
  g.scale = a.has("scale") && a.f("scale") > 0 ? a.f("scale")
                                               : (g.D > 0 ? 1.0 / std::sqrt(double(g.D)) : 1.0);
  if (in.size() > mask_input) {
    const Shape& m = in[mask_input].shape();
    g.has_mask = true;
    g.bool_mask = in[mask_input].dtype() == DType::boolean;
    const std::size_t lead = 4 - m.size();
    std::int64_t stride = 1;
    for (std::size_t d = m.size(); d-- > 0;) {
      g.ms[lead + d] = m[d] == 1 ? 0 : stride;
      stride *= m[d];
    }
  }
  return g;
}

// Row-major C = alpha op(A) op(B) + beta C through OpenBLAS (single-threaded here: the kernels
// thread over blocks themselves).
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                 double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// OpenBLAS's OpenMP build threads a call by omp_get_max_threads() of the calling thread: 1 for
// this scope, so that a serial pass over blocks does not start a team per small product.
struct SerialBlasScope {
  int saved = omp_get_max_threads();
  SerialBlasScope() {
    if (saved > 1) omp_set_num_threads(1);
  }
  ~SerialBlasScope() {
    if (saved > 1) omp_set_num_threads(saved);
  }
};

// The logits of query rows [i0, i0+ni) against keys [j0, j0+nj) of head (b, h) into s (row
// stride nj): scale * q k^T + mask, -inf where masked or causal.
template <class T>
void block_logits(const Geom& g, const T* q, const T* k, const T* mask, const bool* bmask,
                  std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t ni,
                  std::int64_t j0, std::int64_t nj, T* s) {
  const T inf = std::numeric_limits<T>::infinity();
  if (g.D > 0) gemm(false, true, ni, nj, g.D, T(g.scale), q + i0 * g.D, g.D, k + j0 * g.D, g.D, T(0), s, nj);
  else std::fill(s, s + ni * nj, T(0));
  for (std::int64_t ii = 0; ii < ni; ++ii) {
    T* row = s + ii * nj;
    if (g.has_mask) {
      const std::int64_t base = b * g.ms[0] + h * g.ms[1] + (i0 + ii) * g.ms[2] + j0 * g.ms[3];
      if (g.bool_mask) {
        for (std::int64_t jj = 0; jj < nj; ++jj)
          if (!bmask[base + jj * g.ms[3]]) row[jj] = -inf;
      } else {
        for (std::int64_t jj = 0; jj < nj; ++jj) row[jj] += mask[base + jj * g.ms[3]];
      }
    }
    if (g.causal)
      for (std::int64_t jj = std::max<std::int64_t>(0, i0 + ii + 1 - j0); jj < nj; ++jj)
        row[jj] = -inf;
  }
}

// The keys a query block ending before `i_end` can see end here.
std::int64_t key_end(const Geom& g, std::int64_t i_end) {
  return g.causal ? std::min(g.Sk, i_end) : g.Sk;
}
// The first query block that sees key j0 (causal: queries i >= j0).
std::int64_t first_query_block(const Geom& g, std::int64_t j0) {
  return g.causal ? std::min(g.Sq, j0) / kBlockQ * kBlockQ : 0;
}
std::int64_t blocks(std::int64_t n, std::int64_t b) { return (n + b - 1) / b; }
std::int64_t grain_for(std::int64_t work_per_item) {
  return std::max<std::int64_t>(1, kParallelGrain * 8 / std::max<std::int64_t>(work_per_item, 1));
}

template <class T>
void forward(const Geom& g, const T* q, const T* k, const T* v, const T* mask, const bool* bmask,
             T* out, T* lse) {
  const std::int64_t nqb = blocks(g.Sq, kBlockQ);
  const T inf = std::numeric_limits<T>::infinity();
  parallel_for(g.B * g.H * nqb, grain_for(kBlockQ * g.Sk * (g.D + g.Dv)),
               [&](std::int64_t t0, std::int64_t t1) {
    SerialBlasScope serial;
    std::vector<T> s(sz(kBlockQ * kBlockK)), m(sz(kBlockQ)), l(sz(kBlockQ));
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / nqb, i0 = (t % nqb) * kBlockQ;
      const std::int64_t b = bh / g.H, h = bh % g.H, ni = std::min(kBlockQ, g.Sq - i0);
      const T* qh = q + bh * g.Sq * g.D;
      const T* kh = k + bh * g.Sk * g.D;
      const T* vh = v + bh * g.Sk * g.Dv;
      T* ob = out + (bh * g.Sq + i0) * g.Dv;  // this block's output rows
      std::fill(m.begin(), m.end(), -inf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(ob, ob + ni * g.Dv, T(0));
      const std::int64_t jend = key_end(g, i0 + ni);
      for (std::int64_t j0 = 0; j0 < jend; j0 += kBlockK) {
        const std::int64_t nj = std::min(kBlockK, jend - j0);
        block_logits(g, qh, kh, mask, bmask, b, h, i0, ni, j0, nj, s.data());
        for (std::int64_t ii = 0; ii < ni; ++ii) {
          T* row = s.data() + ii * nj;
          T mx = m[ii];
          for (std::int64_t jj = 0; jj < nj; ++jj) mx = std::max(mx, row[jj]);
          if (mx == -inf) {  // every key so far masked out
            std::fill(row, row + nj, T(0));
            continue;
          }
          const T alpha = std::exp(m[ii] - mx);  // 0 on the first visible block
          T sum = 0;
          for (std::int64_t jj = 0; jj < nj; ++jj) {
            row[jj] = std::exp(row[jj] - mx);
            sum += row[jj];
          }
          l[ii] = l[ii] * alpha + sum;
          m[ii] = mx;
          if (alpha != T(1)) {
            T* oi = ob + ii * g.Dv;
            for (std::int64_t c = 0; c < g.Dv; ++c) oi[c] *= alpha;
          }
        }
        if (g.Dv > 0) gemm(false, false, ni, g.Dv, nj, T(1), s.data(), nj, vh + j0 * g.Dv, g.Dv, T(1), ob, g.Dv);
      }
      T* lb = lse + bh * g.Sq + i0;
      for (std::int64_t ii = 0; ii < ni; ++ii) {
        T* oi = ob + ii * g.Dv;
        if (m[ii] == -inf) {  // nothing to attend to: zeros, as FlashAttention does
          std::fill(oi, oi + g.Dv, T(0));
          lb[ii] = -inf;
          continue;
        }
        const T inv = T(1) / l[ii];
        for (std::int64_t c = 0; c < g.Dv; ++c) oi[c] *= inv;
        lb[ii] = m[ii] + std::log(l[ii]);
      }
    }
  });
}

// One block of the backward: P = exp(logits - lse) into p and dS = P * (dout v^T - di) into ds
// (di = rowsum(dout * out) - dlse, per query row). Rows with lse = -inf get zeros.
template <class T>
void block_p_ds(const Geom& g, const T* qh, const T* kh, const T* vh, const T* doh, const T* lh,
                const T* di, const T* mask, const bool* bmask, std::int64_t b, std::int64_t h,
                std::int64_t i0, std::int64_t ni, std::int64_t j0, std::int64_t nj, T* p, T* ds) {
  const T inf = std::numeric_limits<T>::infinity();
  block_logits(g, qh, kh, mask, bmask, b, h, i0, ni, j0, nj, p);
  if (g.Dv > 0) gemm(false, true, ni, nj, g.Dv, T(1), doh + i0 * g.Dv, g.Dv, vh + j0 * g.Dv, g.Dv, T(0), ds, nj);
  else std::fill(ds, ds + ni * nj, T(0));
  for (std::int64_t ii = 0; ii < ni; ++ii) {
    T* pi = p + ii * nj;
    T* dsi = ds + ii * nj;
    const T l = lh[i0 + ii];
    if (l == -inf) {  // a fully masked row: no gradient
      std::fill(pi, pi + nj, T(0));
      std::fill(dsi, dsi + nj, T(0));
      continue;
    }
    const T d = di[i0 + ii];
    for (std::int64_t jj = 0; jj < nj; ++jj) {
      pi[jj] = std::exp(pi[jj] - l);
      dsi[jj] = pi[jj] * (dsi[jj] - d);
    }
  }
}

// Two passes, each parallel without write conflicts: dk and dv per key block (over the query
// blocks that see it), then dq (and the logits' gradient) per query block. Each recomputes P.
template <class T>
void backward(const Geom& g, const T* q, const T* k, const T* v, const T* out, const T* lse,
              const T* dout, const T* dlse, const T* mask, const bool* bmask, T* dq, T* dk, T* dv,
              T* dlogits) {
  // di = rowsum(dout * out) - dlse for every row: O(B H Sq).
  std::vector<T> di(sz(g.B * g.H * g.Sq));
  for (std::int64_t r = 0; r < g.B * g.H * g.Sq; ++r) {
    T d = 0;
    for (std::int64_t c = 0; c < g.Dv; ++c) d += dout[r * g.Dv + c] * out[r * g.Dv + c];
    di[sz(r)] = d - dlse[r];
  }
  const T scale = T(g.scale);
  const std::int64_t nkb = blocks(g.Sk, kBlockK), nqb = blocks(g.Sq, kBlockQ);
  const std::int64_t item_work = std::max(kBlockQ, kBlockK) * std::max(g.Sq, g.Sk) * (g.D + g.Dv);
  auto head = [&](std::int64_t bh, const T*& qh, const T*& kh, const T*& vh, const T*& doh,
                  const T*& lh, const T*& dih) {
    qh = q + bh * g.Sq * g.D;
    kh = k + bh * g.Sk * g.D;
    vh = v + bh * g.Sk * g.Dv;
    doh = dout + bh * g.Sq * g.Dv;
    lh = lse + bh * g.Sq;
    dih = di.data() + bh * g.Sq;
  };
  // Pass 1: dk, dv.
  parallel_for(g.B * g.H * nkb, grain_for(item_work), [&](std::int64_t t0, std::int64_t t1) {
    SerialBlasScope serial;
    std::vector<T> p(sz(kBlockQ * kBlockK)), ds(sz(kBlockQ * kBlockK));
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / nkb, j0 = (t % nkb) * kBlockK, nj = std::min(kBlockK, g.Sk - j0);
      const T *qh, *kh, *vh, *doh, *lh, *dih;
      head(bh, qh, kh, vh, doh, lh, dih);
      T* dkb = dk + (bh * g.Sk + j0) * g.D;
      T* dvb = dv + (bh * g.Sk + j0) * g.Dv;
      std::fill(dkb, dkb + nj * g.D, T(0));
      std::fill(dvb, dvb + nj * g.Dv, T(0));
      for (std::int64_t i0 = first_query_block(g, j0); i0 < g.Sq; i0 += kBlockQ) {
        const std::int64_t ni = std::min(kBlockQ, g.Sq - i0);
        block_p_ds(g, qh, kh, vh, doh, lh, dih, mask, bmask, bh / g.H, bh % g.H, i0, ni, j0, nj,
                   p.data(), ds.data());
        if (g.D > 0) gemm(true, false, nj, g.D, ni, scale, ds.data(), nj, qh + i0 * g.D, g.D, T(1), dkb, g.D);
        if (g.Dv > 0) gemm(true, false, nj, g.Dv, ni, T(1), p.data(), nj, doh + i0 * g.Dv, g.Dv, T(1), dvb, g.Dv);
      }
    }
  });
  // Pass 2: dq and the logits' gradient.
  parallel_for(g.B * g.H * nqb, grain_for(item_work), [&](std::int64_t t0, std::int64_t t1) {
    SerialBlasScope serial;
    std::vector<T> p(sz(kBlockQ * kBlockK)), ds(sz(kBlockQ * kBlockK));
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / nqb, i0 = (t % nqb) * kBlockQ, ni = std::min(kBlockQ, g.Sq - i0);
      const T *qh, *kh, *vh, *doh, *lh, *dih;
      head(bh, qh, kh, vh, doh, lh, dih);
      T* dqb = dq + (bh * g.Sq + i0) * g.D;
      T* dlb = dlogits ? dlogits + (bh * g.Sq + i0) * g.Sk : nullptr;
      std::fill(dqb, dqb + ni * g.D, T(0));
      if (dlb) std::fill(dlb, dlb + ni * g.Sk, T(0));
      const std::int64_t jend = key_end(g, i0 + ni);
      for (std::int64_t j0 = 0; j0 < jend; j0 += kBlockK) {
        const std::int64_t nj = std::min(kBlockK, jend - j0);
        block_p_ds(g, qh, kh, vh, doh, lh, dih, mask, bmask, bh / g.H, bh % g.H, i0, ni, j0, nj,
                   p.data(), ds.data());
        if (g.D > 0) gemm(false, false, ni, g.D, nj, scale, ds.data(), nj, kh + j0 * g.D, g.D, T(1), dqb, g.D);
        if (dlb)
          for (std::int64_t ii = 0; ii < ni; ++ii)
            std::copy(ds.data() + ii * nj, ds.data() + (ii + 1) * nj, dlb + ii * g.Sk + j0);
      }
    }
  });
}

DType work_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

template <class T>
const T* mask_values(const Tensor& m) {
  return m.defined() && m.dtype() != DType::boolean ? m.data<T>() : nullptr;
}
const bool* mask_bools(const Tensor& m) {
  return m.defined() && m.dtype() == DType::boolean ? m.data<bool>() : nullptr;
}

void sdpa_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geom g = geometry(in, 3, a);
  const DType wt = work_dtype(in[0].dtype());
  std::vector<Tensor> w;
  for (std::size_t i = 0; i < 3; ++i) w.push_back(packed(in[i], wt));
  Tensor mask = in.size() > 3 ? packed(in[3], in[3].dtype() == DType::boolean ? DType::boolean : wt)
                              : Tensor();
  WorkOut o(out[0], wt), l(out[1], wt);
  if (g.B * g.H * g.Sq == 0) return;
  if (wt == DType::f64)
    forward<double>(g, w[0].data<double>(), w[1].data<double>(), w[2].data<double>(),
                    mask_values<double>(mask), mask_bools(mask), o.work.data<double>(),
                    l.work.data<double>());
  else
    forward<float>(g, w[0].data<float>(), w[1].data<float>(), w[2].data<float>(),
                   mask_values<float>(mask), mask_bools(mask), o.work.data<float>(),
                   l.work.data<float>());
  o.finish();
  l.finish();
}

void sdpa_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geom g = geometry(in, 7, a);
  const DType wt = work_dtype(in[0].dtype());
  std::vector<Tensor> w;
  for (std::size_t i = 0; i < 7; ++i) w.push_back(packed(in[i], wt));
  Tensor mask = in.size() > 7 ? packed(in[7], in[7].dtype() == DType::boolean ? DType::boolean : wt)
                              : Tensor();
  std::vector<WorkOut> o;
  for (const auto& t : out) o.emplace_back(t, wt);
  if (g.B * g.H == 0) return;
  auto run = [&]<class T>() {
    backward<T>(g, w[0].data<T>(), w[1].data<T>(), w[2].data<T>(), w[3].data<T>(), w[4].data<T>(),
                w[5].data<T>(), w[6].data<T>(), mask_values<T>(mask), mask_bools(mask),
                o[0].work.data<T>(), o[1].work.data<T>(), o[2].work.data<T>(),
                o.size() > 3 ? o[3].work.data<T>() : nullptr);
  };
  if (wt == DType::f64) run.template operator()<double>();
  else run.template operator()<float>();
  for (const auto& t : o) t.finish();
}

}  // namespace

void register_cpu_attention_kernels() {
  register_kernel("scaled_dot_product_attention", DeviceKind::CPU, sdpa_kernel);
  register_kernel("scaled_dot_product_attention_grad", DeviceKind::CPU, sdpa_grad_kernel);
}
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The kernels of the active instruction set (src/internal/cpu_isa.hpp).
void register_cpu_attention_kernels() { SOMA_ISA_SELECT(register_cpu_attention_kernels)(); }
#endif

}  // namespace soma::detail
