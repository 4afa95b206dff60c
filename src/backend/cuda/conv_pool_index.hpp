#pragma once
// Internal: the per-element index logic of the CUDA pooling kernels and of the small kernels
// around cuDNN's convolutions (explicit padding, bias + ReLU), as host+device functions. nvcc
// compiles them into conv_pool.cu; the host compiler compiles them into
// tests/unit/test_cuda_conv_plan.cpp, which runs them over whole index spaces on the CPU and
// compares with the CPU kernels (no GPU on the build machines). No soma header, no C++20, no CUDA
// header: the CPU-only builds (clang 14, SOMA_ENABLE_CUDA=OFF) compile the test too.
//
// The semantics are the CPU kernels' (src/backend/cpu/nn.cpp), exactly:
//   - a pooling window is clipped to the input: padding is never a candidate for the maximum and
//     is not counted by the average (unless count_pad: then every window counts ph * pw, as
//     PyTorch's and ONNX's count_include_pad; each window lies inside the padded input);
//   - the maximum of a window is its FIRST maximum in row-major order, NaN propagating (the first
//     NaN wins), and max_pool2d_grad sends each window's gradient there;
//   - gradients are gathered per input element over the windows that cover it, in increasing
//     (oy, ox) order: the CPU scatters in that order from zero, so f32/f64 sums agree bit for
//     bit, and no atomics are needed (deterministic).
// C is the type arithmetic happens in (float for f16/bf16, as the CPU kernels' work dtype).
#include <cstdint>

#ifndef SOMA_HD
#if defined(__CUDACC__)
#define SOMA_HD __host__ __device__
#else
#define SOMA_HD
#endif
#endif

namespace soma::cuda_detail {

// A pooling launch: `planes` = N*C planes of h x w pooled to oh x ow; window ph x pw, strides
// sh, sw; pt, pl: the padding before the first row / column (the padding after only shows in
// oh, ow).
struct PoolDims {
  std::int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0, ph = 1, pw = 1, sh = 1, sw = 1, pt = 0,
               pl = 0;
  bool count_pad = false;  // average pooling divides by ph * pw (padding counted)
};

// Window of output (oy, ox): rows [y0, y1), columns [x0, x1), clipped to the input.
struct PoolWindow {
  std::int64_t y0, y1, x0, x1;
};

SOMA_HD inline PoolWindow pool_window(const PoolDims& p, std::int64_t oy, std::int64_t ox) {
  std::int64_t y0 = oy * p.sh - p.pt, x0 = ox * p.sw - p.pl;
  std::int64_t y1 = y0 + p.ph < p.h ? y0 + p.ph : p.h;
  std::int64_t x1 = x0 + p.pw < p.w ? x0 + p.pw : p.w;
  y0 = y0 > 0 ? y0 : 0;
  x0 = x0 > 0 ? x0 : 0;
  return {y0, y1, x0, x1};
}

// Offset within `plane` of the window's first maximum (row-major), NaN propagating.
template <class C, class T>
SOMA_HD inline std::int64_t pool_argmax(const T* plane, const PoolDims& p, std::int64_t oy,
                                        std::int64_t ox) {
  const PoolWindow win = pool_window(p, oy, ox);
  std::int64_t best = win.y0 * p.w + win.x0;
  C bv = static_cast<C>(plane[best]);
  for (std::int64_t y = win.y0; y < win.y1; ++y)
    for (std::int64_t x = win.x0; x < win.x1; ++x) {
      const C v = static_cast<C>(plane[y * p.w + x]);
      if (v > bv || (v != v && bv == bv)) {  // greater, or the first NaN
        bv = v;
        best = y * p.w + x;
      }
    }
  return best;
}

// The divisor of an average over the clipped window `win`.
SOMA_HD inline std::int64_t pool_count(const PoolDims& p, const PoolWindow& win) {
  return p.count_pad ? p.ph * p.pw : (win.y1 - win.y0) * (win.x1 - win.x0);
}

// Output element i of max_pool2d_with_indices' indices: the argmax's offset in its plane.
template <class C, class T>
SOMA_HD inline std::int64_t max_pool_index_at(const T* x, const PoolDims& p, std::int64_t i) {
  const std::int64_t plane = i / (p.oh * p.ow), r = i % (p.oh * p.ow);
  return pool_argmax<C>(x + plane * p.h * p.w, p, r / p.ow, r % p.ow);
}

// Output element i (over planes * oh * ow) of max_pool2d(x).
template <class C, class T>
SOMA_HD inline C max_pool_at(const T* x, const PoolDims& p, std::int64_t i) {
  const std::int64_t plane = i / (p.oh * p.ow), r = i % (p.oh * p.ow);
  const T* xp = x + plane * p.h * p.w;
  return static_cast<C>(xp[pool_argmax<C>(xp, p, r / p.ow, r % p.ow)]);
}

// Output element i (pooled shape) of max_pool2d_grad_grad(x, h): h at the window's argmax.
template <class C, class T>
SOMA_HD inline C max_pool_grad_grad_at(const T* x, const T* h, const PoolDims& p,
                                       std::int64_t i) {
  const std::int64_t plane = i / (p.oh * p.ow), r = i % (p.oh * p.ow);
  const std::int64_t base = plane * p.h * p.w;
  return static_cast<C>(h[base + pool_argmax<C>(x + base, p, r / p.ow, r % p.ow)]);
}

// The outputs [lo, hi] along one axis whose windows (size k, stride s, padding before `pad`)
// cover input position `i`; empty when lo > hi.
SOMA_HD inline void covering_windows(std::int64_t i, std::int64_t k, std::int64_t s,
                                     std::int64_t pad, std::int64_t out, std::int64_t& lo,
                                     std::int64_t& hi) {
  // o covers i when o*s - pad <= i < o*s - pad + k.
  const std::int64_t first = i + pad - k + 1;
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  hi = (i + pad) / s;
  if (hi > out - 1) hi = out - 1;
}

// Input element i (over planes * h * w) of max_pool2d_grad(x, g).
template <class C, class T>
SOMA_HD inline C max_pool_grad_at(const T* x, const T* g, const PoolDims& p, std::int64_t i) {
  const std::int64_t plane = i / (p.h * p.w), r = i % (p.h * p.w);
  const std::int64_t iy = r / p.w, ix = r % p.w;
  const T* xp = x + plane * p.h * p.w;
  const T* gp = g + plane * p.oh * p.ow;
  std::int64_t y_lo, y_hi, x_lo, x_hi;
  covering_windows(iy, p.ph, p.sh, p.pt, p.oh, y_lo, y_hi);
  covering_windows(ix, p.pw, p.sw, p.pl, p.ow, x_lo, x_hi);
  C acc = C(0);
  for (std::int64_t oy = y_lo; oy <= y_hi; ++oy)
    for (std::int64_t ox = x_lo; ox <= x_hi; ++ox)
      if (pool_argmax<C>(xp, p, oy, ox) == r) acc += static_cast<C>(gp[oy * p.ow + ox]);
  return acc;
}

// Output element i of avg_pool2d(x): the mean of the clipped window (see pool_count).
template <class C, class T>
SOMA_HD inline C avg_pool_at(const T* x, const PoolDims& p, std::int64_t i) {
  const std::int64_t plane = i / (p.oh * p.ow), r = i % (p.oh * p.ow);
  const T* xp = x + plane * p.h * p.w;
  const PoolWindow win = pool_window(p, r / p.ow, r % p.ow);
  C s = C(0);
  for (std::int64_t y = win.y0; y < win.y1; ++y)
    for (std::int64_t x = win.x0; x < win.x1; ++x) s += static_cast<C>(xp[y * p.w + x]);
  return s / C(pool_count(p, win));
}

// Input element i of avg_pool2d_grad(g): each covering window's g over its element count.
template <class C, class T>
SOMA_HD inline C avg_pool_grad_at(const T* g, const PoolDims& p, std::int64_t i) {
  const std::int64_t plane = i / (p.h * p.w), r = i % (p.h * p.w);
  const std::int64_t iy = r / p.w, ix = r % p.w;
  const T* gp = g + plane * p.oh * p.ow;
  std::int64_t y_lo, y_hi, x_lo, x_hi;
  covering_windows(iy, p.ph, p.sh, p.pt, p.oh, y_lo, y_hi);
  covering_windows(ix, p.pw, p.sw, p.pl, p.ow, x_lo, x_hi);
  C acc = C(0);
  for (std::int64_t oy = y_lo; oy <= y_hi; ++oy)
    for (std::int64_t ox = x_lo; ox <= x_hi; ++ox) {
      const PoolWindow win = pool_window(p, oy, ox);
      acc += static_cast<C>(gp[oy * p.ow + ox]) / C(pool_count(p, win));
    }
  return acc;
}

// A copy of each of `planes` planes into a window of another size: out[y][x] = in[y+dy][x+dx]
// where that is inside `in`, else zero. Negative offsets pad (zeros before), positive ones crop.
struct WindowCopy {
  std::int64_t planes = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0, dy = 0, dx = 0;
};

// Output element i of a window copy; U is an unsigned integer of the element's size (the copy
// moves bits; all-zero bits are 0.0 in every floating type).
template <class U>
SOMA_HD inline U window_copy_at(const U* in, const WindowCopy& c, std::int64_t i) {
  const std::int64_t plane = i / (c.out_h * c.out_w), r = i % (c.out_h * c.out_w);
  const std::int64_t y = r / c.out_w + c.dy, x = r % c.out_w + c.dx;
  if (y < 0 || y >= c.in_h || x < 0 || x >= c.in_w) return U(0);
  return in[(plane * c.in_h + y) * c.in_w + x];
}

// conv2d_bias_act's epilogue on element i of y [N, O, H, W] (hw = H*W): y + b[o], then ReLU as
// the CPU kernel does it (v <= 0 -> +0, NaN stays). b may be null.
template <class C, class T>
SOMA_HD inline C bias_act_at(const T* y, const T* b, std::int64_t channels, std::int64_t hw,
                             bool relu, std::int64_t i) {
  C v = static_cast<C>(y[i]);
  if (b) v += static_cast<C>(b[(i / hw) % channels]);
  if (relu && v <= C(0)) v = C(0);
  return v;
}

}  // namespace soma::cuda_detail
