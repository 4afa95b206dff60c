// CPU kernels for scaled_dot_product_attention and its gradient (src/ops/attention.cpp).
//
// FlashAttention on the CPU: per (batch, head) and block of queries, the keys are visited in
// blocks; the forward keeps a running row maximum m, sum l and unnormalised output (online
// softmax: when m grows, l and the output are rescaled by exp(m_old - m_new)), and writes
// lse = m + log(l). The backward recomputes each block of logits, P = exp(logits - lse) and
//   dS = P * (dout v^T - rowsum(dout * out) + dlse),  dq += scale dS k,  dk += scale dS^T q,
//   dv += P^T dout.
// Memory is the outputs plus a [block_q, block_k] tile and two transposed key/value blocks per
// thread: O(seq * d), never O(seq_q * seq_k) (except the logits' gradient, which the backward
// writes only when an additive mask needs its gradient).
// Inner loops are axpy rows (y[0:n] += a * x[0:n]) over transposed blocks, which the compiler
// vectorises without reassociating sums. f32 and f64 natively; f16/bf16 through f32.
// Threads: the forward over (batch*heads x query blocks), the backward over batch*heads (dk and
// dv gather from every query block of their head).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "internal/copy.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

constexpr std::int64_t kBlockQ = 64, kBlockK = 64;

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

template <class T>
inline void axpy(T* y, T a, const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The logits of query rows [i0, i0+ni) against keys [j0, j0+nj) into s (row stride nj):
// scale * q k^T (kt: the key block transposed, [D, nj]) + mask, -inf where masked or causal.
template <class T>
void block_logits(const Geom& g, const T* q, const T* kt, const T* mask, const bool* bmask,
                  std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t ni,
                  std::int64_t j0, std::int64_t nj, T* s) {
  const T inf = std::numeric_limits<T>::infinity();
  const T scale = T(g.scale);
  for (std::int64_t ii = 0; ii < ni; ++ii) {
    T* row = s + ii * nj;
    std::fill(row, row + nj, T(0));
    const T* qi = q + (i0 + ii) * g.D;
    for (std::int64_t c = 0; c < g.D; ++c) axpy(row, qi[c], kt + c * nj, nj);
    for (std::int64_t jj = 0; jj < nj; ++jj) row[jj] *= scale;
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

// rows [j0, j0+nj) of a [S, n] matrix, transposed into [n, nj]
template <class T>
void transpose_block(const T* x, std::int64_t j0, std::int64_t nj, std::int64_t n, T* out) {
  for (std::int64_t jj = 0; jj < nj; ++jj)
    for (std::int64_t c = 0; c < n; ++c) out[c * nj + jj] = x[(j0 + jj) * n + c];
}

// The last key a block of queries ending before `i_end` can see.
std::int64_t key_end(const Geom& g, std::int64_t i_end) {
  return g.causal ? std::min(g.Sk, i_end) : g.Sk;
}

template <class T>
void forward(const Geom& g, const T* q, const T* k, const T* v, const T* mask, const bool* bmask,
             T* out, T* lse) {
  const std::int64_t nqb = (g.Sq + kBlockQ - 1) / kBlockQ;
  const std::int64_t items = g.B * g.H * nqb;
  const std::int64_t work = kBlockQ * g.Sk * (g.D + g.Dv);
  const T inf = std::numeric_limits<T>::infinity();
  parallel_for(items, std::max<std::int64_t>(1, kParallelGrain * 8 / std::max<std::int64_t>(work, 1)),
               [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> s(sz(kBlockQ * kBlockK)), kt(sz(g.D * kBlockK));
    std::vector<T> m(sz(kBlockQ)), l(sz(kBlockQ));
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / nqb, i0 = (t % nqb) * kBlockQ;
      const std::int64_t b = bh / g.H, h = bh % g.H, ni = std::min(kBlockQ, g.Sq - i0);
      const T* qh = q + bh * g.Sq * g.D;
      const T* kh = k + bh * g.Sk * g.D;
      const T* vh = v + bh * g.Sk * g.Dv;
      T* oh = out + bh * g.Sq * g.Dv;
      std::fill(m.begin(), m.end(), -inf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(oh + i0 * g.Dv, oh + (i0 + ni) * g.Dv, T(0));
      const std::int64_t jend = key_end(g, i0 + ni);
      for (std::int64_t j0 = 0; j0 < jend; j0 += kBlockK) {
        const std::int64_t nj = std::min(kBlockK, jend - j0);
        transpose_block(kh, j0, nj, g.D, kt.data());
        block_logits(g, qh, kt.data(), mask, bmask, b, h, i0, ni, j0, nj, s.data());
        for (std::int64_t ii = 0; ii < ni; ++ii) {
          T* row = s.data() + ii * nj;
          T mx = m[ii];
          for (std::int64_t jj = 0; jj < nj; ++jj) mx = std::max(mx, row[jj]);
          if (mx == -inf) continue;  // every key so far masked out
          const T alpha = std::exp(m[ii] - mx);  // 0 on the first visible block
          T sum = 0;
          for (std::int64_t jj = 0; jj < nj; ++jj) {
            row[jj] = std::exp(row[jj] - mx);
            sum += row[jj];
          }
          l[ii] = l[ii] * alpha + sum;
          m[ii] = mx;
          T* oi = oh + (i0 + ii) * g.Dv;
          if (alpha != T(1))
            for (std::int64_t c = 0; c < g.Dv; ++c) oi[c] *= alpha;
          for (std::int64_t jj = 0; jj < nj; ++jj)
            if (row[jj] != T(0)) axpy(oi, row[jj], vh + (j0 + jj) * g.Dv, g.Dv);
        }
      }
      T* lh = lse + bh * g.Sq;
      for (std::int64_t ii = 0; ii < ni; ++ii) {
        T* oi = oh + (i0 + ii) * g.Dv;
        if (m[ii] == -inf) {  // nothing to attend to: zeros, as FlashAttention does
          std::fill(oi, oi + g.Dv, T(0));
          lh[i0 + ii] = -inf;
          continue;
        }
        const T inv = T(1) / l[ii];
        for (std::int64_t c = 0; c < g.Dv; ++c) oi[c] *= inv;
        lh[i0 + ii] = m[ii] + std::log(l[ii]);
      }
    }
  });
}

template <class T>
void backward(const Geom& g, const T* q, const T* k, const T* v, const T* out, const T* lse,
              const T* dout, const T* dlse, const T* mask, const bool* bmask, T* dq, T* dk, T* dv,
              T* dlogits) {
  const T inf = std::numeric_limits<T>::infinity();
  const T scale = T(g.scale);
  const std::int64_t work = g.Sq * g.Sk * (g.D + g.Dv);
  parallel_for(g.B * g.H, std::max<std::int64_t>(1, kParallelGrain * 8 / std::max<std::int64_t>(work, 1)),
               [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> p(sz(kBlockQ * kBlockK)), dp(sz(kBlockK));
    std::vector<T> kt(sz(g.D * kBlockK)), vt(sz(g.Dv * kBlockK));
    std::vector<T> di(sz(kBlockQ));
    for (std::int64_t bh = t0; bh < t1; ++bh) {
      const std::int64_t b = bh / g.H, h = bh % g.H;
      const T* qh = q + bh * g.Sq * g.D;
      const T* kh = k + bh * g.Sk * g.D;
      const T* vh = v + bh * g.Sk * g.Dv;
      const T* oh = out + bh * g.Sq * g.Dv;
      const T* doh = dout + bh * g.Sq * g.Dv;
      const T* lh = lse + bh * g.Sq;
      const T* dlh = dlse + bh * g.Sq;
      T* dqh = dq + bh * g.Sq * g.D;
      T* dkh = dk + bh * g.Sk * g.D;
      T* dvh = dv + bh * g.Sk * g.Dv;
      T* dlg = dlogits ? dlogits + bh * g.Sq * g.Sk : nullptr;
      std::fill(dqh, dqh + g.Sq * g.D, T(0));
      std::fill(dkh, dkh + g.Sk * g.D, T(0));
      std::fill(dvh, dvh + g.Sk * g.Dv, T(0));
      if (dlg) std::fill(dlg, dlg + g.Sq * g.Sk, T(0));
      for (std::int64_t i0 = 0; i0 < g.Sq; i0 += kBlockQ) {
        const std::int64_t ni = std::min(kBlockQ, g.Sq - i0);
        for (std::int64_t ii = 0; ii < ni; ++ii) {
          const T* oi = oh + (i0 + ii) * g.Dv;
          const T* doi = doh + (i0 + ii) * g.Dv;
          T d = 0;
          for (std::int64_t c = 0; c < g.Dv; ++c) d += doi[c] * oi[c];
          di[ii] = d - dlh[i0 + ii];
        }
        const std::int64_t jend = key_end(g, i0 + ni);
        for (std::int64_t j0 = 0; j0 < jend; j0 += kBlockK) {
          const std::int64_t nj = std::min(kBlockK, jend - j0);
          transpose_block(kh, j0, nj, g.D, kt.data());
          transpose_block(vh, j0, nj, g.Dv, vt.data());
          block_logits(g, qh, kt.data(), mask, bmask, b, h, i0, ni, j0, nj, p.data());
          for (std::int64_t ii = 0; ii < ni; ++ii) {
            const std::int64_t i = i0 + ii;
            if (lh[i] == -inf) continue;  // a fully masked row: no gradient
            T* pi = p.data() + ii * nj;
            for (std::int64_t jj = 0; jj < nj; ++jj) pi[jj] = std::exp(pi[jj] - lh[i]);
            const T* doi = doh + i * g.Dv;
            std::fill(dp.begin(), dp.begin() + nj, T(0));
            for (std::int64_t c = 0; c < g.Dv; ++c) axpy(dp.data(), doi[c], vt.data() + c * nj, nj);
            // dp becomes dS, the gradient of the logits
            for (std::int64_t jj = 0; jj < nj; ++jj) dp[jj] = pi[jj] * (dp[jj] - di[ii]);
            if (dlg) std::copy(dp.begin(), dp.begin() + nj, dlg + i * g.Sk + j0);
            T* dqi = dqh + i * g.D;
            const T* qi = qh + i * g.D;
            for (std::int64_t jj = 0; jj < nj; ++jj) {
              if (pi[jj] == T(0) && dp[jj] == T(0)) continue;
              const std::int64_t j = j0 + jj;
              axpy(dqi, scale * dp[jj], kh + j * g.D, g.D);
              axpy(dkh + j * g.D, scale * dp[jj], qi, g.D);
              axpy(dvh + j * g.Dv, pi[jj], doi, g.Dv);
            }
          }
        }
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

}  // namespace soma::detail
