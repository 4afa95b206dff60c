// CPU kernels for convolution and pooling.
//
// Convolution is im2col + GEMM (OpenBLAS), per image and per group:
//   forward          y[n, g]  = W[g] [O/g, K] @ col(x[n, g]) [K, P]           (K = C/g*KH*KW)
//   backprop_input   dx[n, g] = col2im(W[g]^T @ dy[n, g])
//   backprop_filter  dW[g]   += dy[n, g] [O/g, P] @ col(x[n, g])^T [P, K]      (P = H'*W')
// A 1x1, stride-1, unpadded convolution needs no im2col: col(x) is x itself.
// Threads: with several images and threads, the images are split across the OpenMP pool and
// each GEMM runs single-threaded (OpenBLAS stays on one thread inside an OpenMP region); with one
// image, the loop is serial and OpenBLAS threads each GEMM itself. Nothing nests.
// f32 and f64 are computed natively; f16/bf16 through f32. Inputs of any strides are packed.
// With oneDNN built in (SOMA_HAS_ONEDNN), f32 convolutions go to oneDNN (onednn_conv.cpp) and
// this im2col path serves f64, cases oneDNN rejects and SOMA_CONV_IMPL=im2col.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "internal/conv3d_op.hpp"
#include "internal/copy.hpp"
#include "internal/dense_op.hpp"
#include "internal/dispatch.hpp"
#include "internal/fast_paths.hpp"
#include "internal/optim_updates.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "onednn_conv.hpp"
#include "onednn_matmul.hpp"  // cpu_autocast_dtype
#include "soma/op.hpp"

#define SOMA_ISA_FILE "backend/cpu/nn.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
SOMA_ISA_BEGIN
namespace {

using Ints = std::vector<std::int64_t>;

// The tensor itself when already packed in `dtype`, else a packed copy in it.
Tensor packed(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), dtype, t.device());
  copy_into(t, p);
  return p;
}

DType work_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Runs `body(inputs in the work dtype, output in the work dtype)`, then converts the output back
// when the op's dtype is f16/bf16.
template <class Body>
void with_work_dtype(const std::vector<Tensor>& in, Tensor& out, Body&& body) {
  const DType wt = work_dtype(out.dtype());
  std::vector<Tensor> win;
  for (const auto& t : in) win.push_back(packed(t, wt));
  if (out.dtype() == wt && out.is_contiguous()) {
    body(win, out);
  } else {
    Tensor tmp = Tensor::empty(out.shape(), wt, out.device());
    body(win, tmp);
    copy_into(tmp, out);
  }
}

// ---- convolution geometry ----
struct Conv {
  std::int64_t n, c, h, w;     // input
  std::int64_t o, kh, kw;      // kernel
  std::int64_t oh, ow;         // output
  std::int64_t sh, sw, pt, pl, dh, dw, groups;
  std::int64_t cg() const { return c / groups; }
  std::int64_t og() const { return o / groups; }
  std::int64_t k() const { return cg() * kh * kw; }  // GEMM inner size
  std::int64_t p() const { return oh * ow; }         // output pixels per image
  // 1x1, stride 1, no padding: the input plane is already the im2col matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w;
  }
};

Conv make_conv(const Shape& x, const Shape& w, const Shape& y, const Attrs& a) {
  const Ints &st = a.ints("strides"), &pads = a.ints("pads"), &dil = a.ints("dilation");
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
          st[0], st[1], pads[0], pads[2], dil[0], dil[1], a.i("groups")};
}

// col [cg*kh*kw, oh*ow] from one group of one image, x [cg, h, w]; zeros where the window
// reaches into the padding.
template <class T>
void im2col(const Conv& cv, const T* x, T* col) {
  const std::int64_t P = cv.p();
  for (std::int64_t ci = 0; ci < cv.cg(); ++ci) {
    const T* plane = x + ci * cv.h * cv.w;
    for (std::int64_t i = 0; i < cv.kh; ++i)
      for (std::int64_t j = 0; j < cv.kw; ++j) {
        T* row = col + ((ci * cv.kh + i) * cv.kw + j) * P;
        const std::int64_t off_w = j * cv.dw - cv.pl;
        // Output columns whose input column lies inside [0, w): [ow0, ow1).
        std::int64_t ow0 = off_w >= 0 ? 0 : (-off_w + cv.sw - 1) / cv.sw;
        std::int64_t ow1 = cv.w - off_w <= 0 ? 0 : (cv.w - off_w + cv.sw - 1) / cv.sw;
        ow0 = std::min(ow0, cv.ow);
        ow1 = std::clamp(ow1, ow0, cv.ow);
        for (std::int64_t oy = 0; oy < cv.oh; ++oy) {
          T* r = row + oy * cv.ow;
          const std::int64_t iy = oy * cv.sh - cv.pt + i * cv.dh;
          if (iy < 0 || iy >= cv.h) {
            std::fill(r, r + cv.ow, T(0));
            continue;
          }
          const T* src = plane + iy * cv.w;
          std::fill(r, r + ow0, T(0));
          if (cv.sw == 1 && ow1 > ow0) std::copy(src + ow0 + off_w, src + ow1 + off_w, r + ow0);
          else
            for (std::int64_t ox = ow0; ox < ow1; ++ox) r[ox] = src[ox * cv.sw + off_w];
          std::fill(r + ow1, r + cv.ow, T(0));
        }
      }
  }
}

// The adjoint of im2col: adds col back into dx [cg, h, w] (which the caller zeroed).
template <class T>
void col2im(const Conv& cv, const T* col, T* dx) {
  const std::int64_t P = cv.p();
  for (std::int64_t ci = 0; ci < cv.cg(); ++ci) {
    T* plane = dx + ci * cv.h * cv.w;
    for (std::int64_t i = 0; i < cv.kh; ++i)
      for (std::int64_t j = 0; j < cv.kw; ++j) {
        const T* row = col + ((ci * cv.kh + i) * cv.kw + j) * P;
        const std::int64_t off_w = j * cv.dw - cv.pl;
        std::int64_t ow0 = off_w >= 0 ? 0 : (-off_w + cv.sw - 1) / cv.sw;
        std::int64_t ow1 = cv.w - off_w <= 0 ? 0 : (cv.w - off_w + cv.sw - 1) / cv.sw;
        ow0 = std::min(ow0, cv.ow);
        ow1 = std::clamp(ow1, ow0, cv.ow);
        for (std::int64_t oy = 0; oy < cv.oh; ++oy) {
          const std::int64_t iy = oy * cv.sh - cv.pt + i * cv.dh;
          if (iy < 0 || iy >= cv.h) continue;
          const T* r = row + oy * cv.ow;
          T* dst = plane + iy * cv.w;
          if (cv.sw == 1)
            for (std::int64_t ox = ow0; ox < ow1; ++ox) dst[ox + off_w] += r[ox];
          else
            for (std::int64_t ox = ow0; ox < ow1; ++ox) dst[ox * cv.sw + off_w] += r[ox];
        }
      }
  }
}

// Row-major C = alpha * op(A) @ op(B) + beta * C.
template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
}

void check_blas_size(const char* op, const Conv& cv) {
  for (std::int64_t v : {cv.k(), cv.p(), cv.og()})
    if (v > std::numeric_limits<int>::max())
      fail(op, "a GEMM dimension (", v, ") is too large for BLAS");
}

// Runs per_image(n, scratch) for every image: split across threads when there are several
// images and threads (each thread with its own scratch), else serially with BLAS threading.
template <class T, class F>
void for_each_image(std::int64_t n_images, std::int64_t scratch_elems, std::int64_t work_per_image,
                    F&& per_image) {
  const int threads = omp_get_max_threads();
  // Images in parallel when there are enough of them, or when each is too small for BLAS to
  // thread well; tiny problems stay on one thread (a parallel region costs more).
  const bool split = n_images > 1 && threads > 1 && !omp_in_parallel() &&
                     n_images * work_per_image >= (1 << 16) &&
                     (n_images >= threads || work_per_image < (1 << 21));
  if (!split) {
    std::vector<T> scratch(std::size_t(std::max<std::int64_t>(scratch_elems, 0)));
    for (std::int64_t i = 0; i < n_images; ++i) per_image(i, scratch.data(), 0);
    return;
  }
  const int nt = int(std::min<std::int64_t>(threads, n_images));
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    std::vector<T> scratch(std::size_t(std::max<std::int64_t>(scratch_elems, 0)));
    const std::int64_t chunk = (n_images + nt - 1) / nt;
    const std::int64_t b = t * chunk, e = std::min(n_images, b + chunk);
    for (std::int64_t i = b; i < e; ++i) per_image(i, scratch.data(), t);
  }
}

template <class T>
void conv2d_forward(const Conv& cv, const T* x, const T* w, T* y) {
  const std::int64_t K = cv.k(), P = cv.p(), og = cv.og(), cg = cv.cg();
  const bool pw = cv.pointwise();
  for_each_image<T>(cv.n, pw ? 0 : K * P, cv.o * K * P, [&](std::int64_t n, T* col, int) {
    for (std::int64_t g = 0; g < cv.groups; ++g) {
      const T* xg = x + (n * cv.c + g * cg) * cv.h * cv.w;
      const T* b = xg;
      if (!pw) {
        im2col(cv, xg, col);
        b = col;
      }
      gemm<T>(false, false, og, P, K, w + g * og * K, K, b, P, T(0),
              y + (n * cv.o + g * og) * P, P);
    }
  });
}

template <class T>
void conv2d_backprop_input(const Conv& cv, const T* gy, const T* w, T* dx) {
  const std::int64_t K = cv.k(), P = cv.p(), og = cv.og(), cg = cv.cg();
  const bool pw = cv.pointwise();
  for_each_image<T>(cv.n, pw ? 0 : K * P, cv.o * K * P, [&](std::int64_t n, T* col, int) {
    T* dxn = dx + n * cv.c * cv.h * cv.w;
    if (!pw) std::fill(dxn, dxn + cv.c * cv.h * cv.w, T(0));
    for (std::int64_t g = 0; g < cv.groups; ++g) {
      T* dxg = dxn + g * cg * cv.h * cv.w;
      T* dst = pw ? dxg : col;
      gemm<T>(true, false, K, P, og, w + g * og * K, K, gy + (n * cv.o + g * og) * P, P, T(0),
              dst, P);
      if (!pw) col2im(cv, col, dxg);
    }
  });
}

template <class T>
void conv2d_backprop_filter(const Conv& cv, const T* x, const T* gy, T* dw) {
  const std::int64_t K = cv.k(), P = cv.p(), og = cv.og(), cg = cv.cg();
  const bool pw = cv.pointwise();
  const std::int64_t wsize = cv.o * K;
  // One accumulator per thread (the first is dw itself), summed at the end.
  const int threads = std::max(1, omp_get_max_threads());
  std::vector<std::vector<T>> partial(std::size_t(threads - 1));
  std::fill(dw, dw + wsize, T(0));
  for_each_image<T>(cv.n, pw ? 0 : K * P, cv.o * K * P, [&](std::int64_t n, T* col, int t) {
    T* acc = dw;
    if (t > 0) {
      auto& buf = partial[std::size_t(t - 1)];
      if (buf.empty()) buf.assign(std::size_t(wsize), T(0));
      acc = buf.data();
    }
    for (std::int64_t g = 0; g < cv.groups; ++g) {
      const T* xg = x + (n * cv.c + g * cg) * cv.h * cv.w;
      const T* b = xg;
      if (!pw) {
        im2col(cv, xg, col);
        b = col;
      }
      gemm<T>(false, true, og, K, P, gy + (n * cv.o + g * og) * P, P, b, P, T(1),
              acc + g * og * K, K);
    }
  });
  for (const auto& buf : partial)
    if (!buf.empty())
      for (std::int64_t i = 0; i < wsize; ++i) dw[i] += buf[std::size_t(i)];
}

// oneDNN's view of a convolution (f32 only; f64 and switched-off cases run im2col).
ConvGeometry onednn_geometry(const Conv& cv, const Attrs& a) {
  const Ints& pads = a.ints("pads");
  return {cv.n,  cv.c,  cv.h,  cv.w,  cv.o,  cv.kh,    cv.kw,    cv.oh,    cv.ow,   cv.sh,
          cv.sw, cv.pt, pads[1], cv.pl, pads[3], cv.dh, cv.dw, cv.groups};
}

template <class F>
void dispatch_work(DType t, F&& f) {
  if (t == DType::f64) f.template operator()<double>();
  else f.template operator()<float>();
}

void conv2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  Conv cv = make_conv(in[0].shape(), in[1].shape(), out[0].shape(), a);
  if (out[0].numel() == 0) return;
  check_blas_size("conv2d", cv);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      if (cv.k() == 0) return fill_value(o, 0.0);
      if constexpr (std::is_same_v<T, float>)
        if (onednn_conv_forward(onednn_geometry(cv, a), wi[0].data<T>(), wi[1].data<T>(),
                                o.data<T>(), wi[1].storage()))
          return;
      conv2d_forward<T>(cv, wi[0].data<T>(), wi[1].data<T>(), o.data<T>());
    });
  });
}

// y = act(conv2d(x, w) + b), act linear or ReLU (attr "relu"), b optional: Conv2D's forward in
// one call.
// f32 packed operands go to one oneDNN primitive (bias argument, ReLU post-op); anything else,
// and bf16 autocast (the convolution in bf16, as conv2d's kernel does it), runs the convolution
// kernel and one pass for bias and activation, with the separate ops' rounding (the sum rounded
// to the output dtype, then the activation).
void conv2d_bias_act_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  const Tensor* b = in.size() == 3 ? &in[2] : nullptr;  // optional
  if (y.numel() == 0) return;
  const bool relu = a.i("relu") != 0;
  if (cpu_autocast_dtype() == DType::f32 && y.dtype() == DType::f32 && x.dtype() == DType::f32 &&
      x.is_contiguous() && w.is_contiguous() && (!b || b->is_contiguous()) &&
      y.is_contiguous()) {
    Conv cv = make_conv(x.shape(), w.shape(), y.shape(), a);
    check_blas_size("conv2d", cv);
    if (cv.k() > 0 && onednn_conv_forward_fused(onednn_geometry(cv, a), x.data<float>(),
                                                 w.data<float>(), w.storage(),
                                                 b ? b->data<float>() : nullptr, relu,
                                                 y.data<float>()))
      return;
  }
  if (b) {
    std::vector<Tensor> xw{x, w};
    conv2d_kernel(xw, out, a);
  } else {
    conv2d_kernel(in, out, a);
  }
  if (!b && !relu) return;
  const std::int64_t n = y.shape()[0], c = y.shape()[1], hw = y.shape()[2] * y.shape()[3];
  const std::int64_t bs = b ? b->strides()[0] : 0;
  dispatch_floating(y.dtype(), "conv2d_bias_act", [&]<class T>() {
    using C = compute_t<T>;
    T* py = y.data<T>();  // the op's fresh output: contiguous
    const T* pb = b ? b->data<T>() : nullptr;
    parallel_for(n * c, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(hw, 1)),
                 [&](std::int64_t r0, std::int64_t r1) {
                   for (std::int64_t r = r0; r < r1; ++r) {
                     T* row = py + r * hw;
                     if (pb) {
                       const C bias = C(pb[(r % c) * bs]);
                       for (std::int64_t j = 0; j < hw; ++j) {
                         const T v = T(C(row[j]) + bias);
                         row[j] = relu ? (C(v) <= C(0) ? T(C(0)) : v) : v;  // NaN stays
                       }
                     } else {
                       for (std::int64_t j = 0; j < hw; ++j)
                         row[j] = C(row[j]) <= C(0) ? T(C(0)) : row[j];  // relu; NaN stays
                     }
                   }
                 });
  });
}

void backprop_input_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a) {
  Conv cv = make_conv(out[0].shape(), in[1].shape(), in[0].shape(), a);
  if (out[0].numel() == 0) return;
  check_blas_size("conv2d_backprop_input", cv);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      if (cv.og() == 0 || cv.p() == 0) return fill_value(o, 0.0);
      if constexpr (std::is_same_v<T, float>)
        if (onednn_conv_backward_data(onednn_geometry(cv, a), wi[0].data<T>(), wi[1].data<T>(),
                                      o.data<T>(), wi[1].storage()))
          return;
      conv2d_backprop_input<T>(cv, wi[0].data<T>(), wi[1].data<T>(), o.data<T>());
    });
  });
}

void backprop_filter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  Conv cv = make_conv(in[0].shape(), out[0].shape(), in[1].shape(), a);
  if (out[0].numel() == 0) return;
  check_blas_size("conv2d_backprop_filter", cv);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      if (cv.n == 0 || cv.p() == 0) return fill_value(o, 0.0);
      if constexpr (std::is_same_v<T, float>)
        if (onednn_conv_backward_weights(onednn_geometry(cv, a), wi[0].data<T>(),
                                         wi[1].data<T>(), o.data<T>()))
          return;
      conv2d_backprop_filter<T>(cv, wi[0].data<T>(), wi[1].data<T>(), o.data<T>());
    });
  });
}

// ---- pooling: direct loops over (image, channel) planes ----
// The shape rule (pool_geometry, src/ops/nn.cpp) refuses an empty H or W and padding as large as
// the window, so every window clipped to the input is non-empty: argmax may read its first
// element and the average divides by at least 1. An empty batch or channel dim means no planes.
struct Pool {
  std::int64_t planes, h, w, oh, ow, ph, pw, sh, sw, pt, pl;
  bool count_pad = false;  // averages divide by ph * pw (attr count_include_pad)
  // The divisor of the average over a clipped window (each window lies in the padded input).
  std::int64_t count(std::int64_t y0, std::int64_t y1, std::int64_t x0, std::int64_t x1) const {
    return count_pad ? ph * pw : (y1 - y0) * (x1 - x0);
  }
  // Window rows [y0, y1) and columns [x0, x1), clipped to the input (padding excluded).
  void window(std::int64_t oy, std::int64_t ox, std::int64_t& y0, std::int64_t& y1,
              std::int64_t& x0, std::int64_t& x1) const {
    y0 = oy * sh - pt;
    x0 = ox * sw - pl;
    y1 = std::min(y0 + ph, h);
    x1 = std::min(x0 + pw, w);
    y0 = std::max<std::int64_t>(y0, 0);
    x0 = std::max<std::int64_t>(x0, 0);
  }
  // Offset within the plane of the window's first maximum (row-major order).
  template <class T>
  std::int64_t argmax(const T* plane, std::int64_t oy, std::int64_t ox) const {
    std::int64_t y0, y1, x0, x1;
    window(oy, ox, y0, y1, x0, x1);
    std::int64_t best = y0 * w + x0;
    T bv = plane[best];
    for (std::int64_t y = y0; y < y1; ++y)
      for (std::int64_t x = x0; x < x1; ++x) {
        const T v = plane[y * w + x];
        if (v > bv || (std::isnan(v) && !std::isnan(bv))) {  // NaN propagates, as in TF
          bv = v;
          best = y * w + x;
        }
      }
    return best;
  }
};

Pool make_pool(const Shape& x, const Shape& y, const Attrs& a) {
  const Ints &pool = a.ints("pool"), &st = a.ints("strides"), &pads = a.ints("pads");
  const bool count_pad = a.has("count_include_pad") && a.i("count_include_pad") != 0;
  return {x[0] * x[1], x[2],    x[3],    y[2],    y[3],     pool[0],
          pool[1],     st[0],   st[1],   pads[0], pads[2], count_pad};
}

// The common 2x2, stride-2, unpadded window (every CNN's MaxPool2D(2)) gets unrolled loops;
// same result as Pool::argmax: the first maximum in row-major order, NaN propagating.
bool is_pool2x2(const Pool& p) {
  return p.ph == 2 && p.pw == 2 && p.sh == 2 && p.sw == 2 && p.pt == 0 && p.pl == 0 &&
         2 * p.oh <= p.h && 2 * p.ow <= p.w;
}
template <class T>
inline bool beats(T v, T best) {
  return v > best || (std::isnan(v) && !std::isnan(best));
}
// Index 0..3 of the first maximum of (a, b; c, d).
template <class T>
inline int argmax4(T a, T b, T c, T d) {
  int k = 0;
  T m = a;
  if (beats(b, m)) m = b, k = 1;
  if (beats(c, m)) m = c, k = 2;
  if (beats(d, m)) k = 3;
  return k;
}

#if SOMA_ISA_AVX512
// 2x2 stride-2 windows, 16 outputs per step (f32). A row chunk of n <= 16 outputs reads 2n
// floats of the two input rows (masked, so no read past the row), splits them into the windows'
// four corners a b / c d with two-source permutes, and runs the scalar loop's `beats` chain
// lane-wise: v beats m when m is not NaN and !(v <= m) (v greater, or v NaN). Same result as
// argmax4: the first maximum in row-major order, NaN propagating.
struct Pool2x2Avx512 {
  // Written out: an implicit constructor would be compiled without this pass's AVX-512 options
  // (GCC defines it where it is first used, outside the pragma; isa_foreach.hpp).
  Pool2x2Avx512() {}
  __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);

  static __mmask16 beats(__m512 v, __m512 m) {
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(m, m, _CMP_ORD_Q), v, m, _CMP_NLE_UQ);
  }
  static std::uint32_t lanes(std::int64_t n) {  // mask of the 2n input floats of n outputs
    return n >= 16 ? 0xFFFFFFFFu : (std::uint32_t(1) << (2 * n)) - 1;
  }
  static __mmask16 outs(std::int64_t n) {  // mask of n outputs
    return __mmask16(n >= 16 ? 0xFFFFu : (1u << n) - 1);
  }
  // Corners of n windows starting at input column 2*ox0 of rows r0, r1.
  void corners(const float* r0, const float* r1, std::int64_t n, __m512& a, __m512& b,
               __m512& c, __m512& d) const {
    const std::uint32_t m = lanes(n);
    const __mmask16 ml = __mmask16(m & 0xFFFF), mh = __mmask16(m >> 16);
    const __m512 x0 = _mm512_maskz_loadu_ps(ml, r0), x1 = _mm512_maskz_loadu_ps(mh, r0 + 16);
    const __m512 y0 = _mm512_maskz_loadu_ps(ml, r1), y1 = _mm512_maskz_loadu_ps(mh, r1 + 16);
    a = _mm512_permutex2var_ps(x0, even, x1);
    b = _mm512_permutex2var_ps(x0, odd, x1);
    c = _mm512_permutex2var_ps(y0, even, y1);
    d = _mm512_permutex2var_ps(y0, odd, y1);
  }
  void forward_row(const float* r0, const float* r1, float* y, std::int64_t ow) const {
    for (std::int64_t ox = 0; ox < ow; ox += 16) {
      const std::int64_t n = std::min<std::int64_t>(16, ow - ox);
      __m512 a, b, c, d;
      corners(r0 + 2 * ox, r1 + 2 * ox, n, a, b, c, d);
      __m512 m = _mm512_mask_mov_ps(a, beats(b, a), b);
      m = _mm512_mask_mov_ps(m, beats(c, m), c);
      m = _mm512_mask_mov_ps(m, beats(d, m), d);
      _mm512_mask_storeu_ps(y + ox, outs(n), m);
    }
  }
  // dx rows d0, d1 (2*ow columns) from g: each window's g at its first maximum, 0 elsewhere.
  void backward_row(const float* r0, const float* r1, const float* g, float* d0, float* d1,
                    std::int64_t ow) const {
    for (std::int64_t ox = 0; ox < ow; ox += 16) {
      const std::int64_t n = std::min<std::int64_t>(16, ow - ox);
      __m512 a, b, c, d;
      corners(r0 + 2 * ox, r1 + 2 * ox, n, a, b, c, d);
      const __mmask16 kb = beats(b, a);
      __m512 m = _mm512_mask_mov_ps(a, kb, b);
      const __mmask16 kc = beats(c, m);
      m = _mm512_mask_mov_ps(m, kc, c);
      const __mmask16 kd = beats(d, m);
      const __mmask16 sd = kd, sc = __mmask16(kc & ~kd), sb = __mmask16(kb & ~kc & ~kd),
                      sa = __mmask16(~(kb | kc | kd));
      const std::uint32_t mo = lanes(n);
      const __m512 gv = _mm512_maskz_loadu_ps(outs(n), g + ox);
      const __m512 da = _mm512_maskz_mov_ps(sa, gv), db = _mm512_maskz_mov_ps(sb, gv);
      const __m512 dc = _mm512_maskz_mov_ps(sc, gv), dd = _mm512_maskz_mov_ps(sd, gv);
      const __mmask16 ml = __mmask16(mo & 0xFFFF), mh = __mmask16(mo >> 16);
      _mm512_mask_storeu_ps(d0 + 2 * ox, ml, _mm512_permutex2var_ps(da, lo, db));
      _mm512_mask_storeu_ps(d0 + 2 * ox + 16, mh, _mm512_permutex2var_ps(da, hi, db));
      _mm512_mask_storeu_ps(d1 + 2 * ox, ml, _mm512_permutex2var_ps(dc, lo, dd));
      _mm512_mask_storeu_ps(d1 + 2 * ox + 16, mh, _mm512_permutex2var_ps(dc, hi, dd));
    }
  }
};
#endif

template <class F>
void for_each_plane(const Pool& p, F&& f) {
  const std::int64_t per = std::max<std::int64_t>(1, p.oh * p.ow * p.ph * p.pw + p.h * p.w);
  parallel_for(p.planes, std::max<std::int64_t>(1, kParallelGrain / per),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t i = b; i < e; ++i) f(i);
               });
}

void max_pool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  Pool p = make_pool(in[0].shape(), out[0].shape(), a);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      T* y = o.data<T>();
      const bool fast = is_pool2x2(p) && fast_paths_enabled();
#if SOMA_ISA_AVX512
      const Pool2x2Avx512 vec;
#endif
      for_each_plane(p, [&](std::int64_t i) {
        const T* plane = x + i * p.h * p.w;
        T* yo = y + i * p.oh * p.ow;
        if (fast) {
#if SOMA_ISA_AVX512
          if constexpr (std::is_same_v<T, float>) {
            for (std::int64_t oy = 0; oy < p.oh; ++oy) {
              const float* r0 = plane + 2 * oy * p.w;
              vec.forward_row(r0, r0 + p.w, yo + oy * p.ow, p.ow);
            }
            return;
          }
#endif
          for (std::int64_t oy = 0; oy < p.oh; ++oy) {
            const T* r0 = plane + 2 * oy * p.w;
            const T* r1 = r0 + p.w;
            T* yr = yo + oy * p.ow;
            for (std::int64_t ox = 0; ox < p.ow; ++ox) {
              const T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
              T m = a;
              if (beats(b, m)) m = b;
              if (beats(c, m)) m = c;
              if (beats(d, m)) m = d;
              yr[ox] = m;
            }
          }
          return;
        }
        for (std::int64_t oy = 0; oy < p.oh; ++oy)
          for (std::int64_t ox = 0; ox < p.ow; ++ox)
            yo[oy * p.ow + ox] = plane[p.argmax(plane, oy, ox)];
      });
    });
  });
}

// in: x, g (pooled shape) -> dx (x's shape): each g goes to its window's first maximum.
void max_pool_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                          const Attrs& a) {
  Pool p = make_pool(in[0].shape(), in[1].shape(), a);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      const T* g = wi[1].data<T>();
      T* dx = o.data<T>();
      const bool fast = is_pool2x2(p) && fast_paths_enabled();
#if SOMA_ISA_AVX512
      const Pool2x2Avx512 vec;
#endif
      for_each_plane(p, [&](std::int64_t i) {
        const T* plane = x + i * p.h * p.w;
        const T* gi = g + i * p.oh * p.ow;
        T* d = dx + i * p.h * p.w;
        if (fast) {  // windows do not overlap: each input gets its g or 0, written once
          if (2 * p.oh != p.h || 2 * p.ow != p.w) std::fill(d, d + p.h * p.w, T(0));
#if SOMA_ISA_AVX512
          if constexpr (std::is_same_v<T, float>) {
            for (std::int64_t oy = 0; oy < p.oh; ++oy) {
              const float* r0 = plane + 2 * oy * p.w;
              float* d0 = d + 2 * oy * p.w;
              vec.backward_row(r0, r0 + p.w, gi + oy * p.ow, d0, d0 + p.w, p.ow);
            }
            return;
          }
#endif
          for (std::int64_t oy = 0; oy < p.oh; ++oy) {
            const T* r0 = plane + 2 * oy * p.w;
            const T* r1 = r0 + p.w;
            T* d0 = d + 2 * oy * p.w;
            T* d1 = d0 + p.w;
            const T* gr = gi + oy * p.ow;
            for (std::int64_t ox = 0; ox < p.ow; ++ox) {
              const int k = argmax4(r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]);
              const T gv = gr[ox];
              d0[2 * ox] = k == 0 ? gv : T(0);
              d0[2 * ox + 1] = k == 1 ? gv : T(0);
              d1[2 * ox] = k == 2 ? gv : T(0);
              d1[2 * ox + 1] = k == 3 ? gv : T(0);
            }
          }
          return;
        }
        std::fill(d, d + p.h * p.w, T(0));
        for (std::int64_t oy = 0; oy < p.oh; ++oy)
          for (std::int64_t ox = 0; ox < p.ow; ++ox)
            d[p.argmax(plane, oy, ox)] += gi[oy * p.ow + ox];
      });
    });
  });
}

// in: x, h (x's shape) -> h read at each window's first maximum (pooled shape).
void max_pool_grad_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                               const Attrs& a) {
  Pool p = make_pool(in[0].shape(), out[0].shape(), a);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      const T* h = wi[1].data<T>();
      T* y = o.data<T>();
      for_each_plane(p, [&](std::int64_t i) {
        const T* plane = x + i * p.h * p.w;
        const T* hi = h + i * p.h * p.w;
        T* yo = y + i * p.oh * p.ow;
        for (std::int64_t oy = 0; oy < p.oh; ++oy)
          for (std::int64_t ox = 0; ox < p.ow; ++ox)
            yo[oy * p.ow + ox] = hi[p.argmax(plane, oy, ox)];
      });
    });
  });
}

void avg_pool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  Pool p = make_pool(in[0].shape(), out[0].shape(), a);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      T* y = o.data<T>();
      for_each_plane(p, [&](std::int64_t i) {
        const T* plane = x + i * p.h * p.w;
        T* yo = y + i * p.oh * p.ow;
        for (std::int64_t oy = 0; oy < p.oh; ++oy)
          for (std::int64_t ox = 0; ox < p.ow; ++ox) {
            std::int64_t y0, y1, x0, x1;
            p.window(oy, ox, y0, y1, x0, x1);
            T s = 0;
            for (std::int64_t yy = y0; yy < y1; ++yy)
              for (std::int64_t xx = x0; xx < x1; ++xx) s += plane[yy * p.w + xx];
            yo[oy * p.ow + ox] = s / T(p.count(y0, y1, x0, x1));
          }
      });
    });
  });
}

// in: g (pooled shape) -> dx (attr input_shape): g / count spread over each window.
void avg_pool_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                          const Attrs& a) {
  Pool p = make_pool(out[0].shape(), in[0].shape(), a);
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* g = wi[0].data<T>();
      T* dx = o.data<T>();
      for_each_plane(p, [&](std::int64_t i) {
        const T* gi = g + i * p.oh * p.ow;
        T* d = dx + i * p.h * p.w;
        std::fill(d, d + p.h * p.w, T(0));
        for (std::int64_t oy = 0; oy < p.oh; ++oy)
          for (std::int64_t ox = 0; ox < p.ow; ++ox) {
            std::int64_t y0, y1, x0, x1;
            p.window(oy, ox, y0, y1, x0, x1);
            const T v = gi[oy * p.ow + ox] / T(p.count(y0, y1, x0, x1));
            for (std::int64_t yy = y0; yy < y1; ++yy)
              for (std::int64_t xx = x0; xx < x1; ++xx) d[yy * p.w + xx] += v;
          }
      });
    });
  });
}

// in: x -> y (pooled), indices (i64, pooled shape): each window's first maximum and its offset
// within the (n, c) plane (PyTorch's indices).
void max_pool_with_indices_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                  const Attrs& a) {
  Pool p = make_pool(in[0].shape(), out[0].shape(), a);
  Tensor ind = out[1].is_contiguous() ? out[1] : Tensor::empty(out[1].shape(), DType::i64);
  std::int64_t* idx = ind.data<std::int64_t>();
  with_work_dtype(in, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      T* y = o.data<T>();
      for_each_plane(p, [&](std::int64_t i) {
        const T* plane = x + i * p.h * p.w;
        for (std::int64_t r = 0; r < p.oh * p.ow; ++r) {
          const std::int64_t k = p.argmax(plane, r / p.ow, r % p.ow);
          y[i * p.oh * p.ow + r] = plane[k];
          idx[i * p.oh * p.ow + r] = k;
        }
      });
    });
  });
  if (!out[1].is_contiguous()) copy_into(ind, out[1]);
}

// in: x, indices (same shape, i64 plane offsets) -> zeros of attr output_size with each x at
// its offset in its plane; the last write in row-major order wins (as scatter).
void max_unpool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Shape& xs = in[0].shape();
  const Shape& os = out[0].shape();
  const std::int64_t planes = xs[0] * xs[1], n = xs[2] * xs[3], hw = os[2] * os[3];
  const Tensor ix = in[1].contiguous();
  const std::int64_t* idx = ix.data<std::int64_t>();
  for (std::int64_t i = 0; i < planes * n; ++i)
    if (idx[i] < 0 || idx[i] >= hw)
      fail("max_unpool2d", "index ", idx[i], " is outside the output plane of ", os[2], "x",
           os[3], " (output size ", shape_str(os), ")");
  with_work_dtype({in[0]}, out[0], [&](const std::vector<Tensor>& wi, const Tensor& o) {
    dispatch_work(o.dtype(), [&]<class T>() {
      const T* x = wi[0].data<T>();
      T* y = o.data<T>();
      std::fill(y, y + planes * hw, T(0));
      for (std::int64_t pl = 0; pl < planes; ++pl)
        for (std::int64_t j = 0; j < n; ++j) y[pl * hw + idx[pl * n + j]] = x[pl * n + j];
    });
  });
}

}  // namespace

void register_cpu_nn_kernels() {
  register_cpu_conv3d_kernels();  // src/backend/cpu/conv3d.cpp
  register_kernel("conv2d", DeviceKind::CPU, conv2d_kernel);
  register_kernel("conv2d_bias_act", DeviceKind::CPU, conv2d_bias_act_kernel);
  register_kernel("conv2d_backprop_input", DeviceKind::CPU, backprop_input_kernel);
  register_kernel("conv2d_backprop_filter", DeviceKind::CPU, backprop_filter_kernel);
  register_kernel("max_pool2d", DeviceKind::CPU, max_pool_kernel);
  register_kernel("max_pool2d_grad", DeviceKind::CPU, max_pool_grad_kernel);
  register_kernel("max_pool2d_grad_grad", DeviceKind::CPU, max_pool_grad_grad_kernel);
  register_kernel("avg_pool2d", DeviceKind::CPU, avg_pool_kernel);
  register_kernel("max_pool2d_with_indices", DeviceKind::CPU, max_pool_with_indices_kernel);
  register_kernel("max_unpool2d", DeviceKind::CPU, max_unpool_kernel);
  register_kernel("avg_pool2d_grad", DeviceKind::CPU, avg_pool_grad_kernel);
  // The layer ops (src/ops/dense.cpp, src/ops/optim_updates.cpp).
  register_cpu_dense_kernel();
  register_cpu_optim_update_kernels();
}
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The kernels of the active instruction set (src/internal/cpu_isa.hpp).
void register_cpu_nn_kernels() { SOMA_ISA_SELECT(register_cpu_nn_kernels)(); }
#endif

}  // namespace soma::detail
