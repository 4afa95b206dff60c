#pragma once
// Internal: Winograd F(2x2, 5x5) f32 convolution for Conv2D (inference, training forward and
// backward data)
// (src/backend/cpu/conv_winograd.cpp). onednn_conv_forward_fused tries it first; it computes
// y = act(conv(x, w) + bias) with 9 multiplications per output and input channel instead of 25
// (6x6 input tiles, 2x2 output tiles; the element-wise stage is 36 GEMMs [tiles, C] x [C, O]).
#include <bit>
#include <cstdint>
#include <memory>

#include "onednn_conv.hpp"

namespace soma::detail {

// max |p[i]| over p[0, n) (0 when n is 0); +inf when a value is infinite, NaN when one is NaN:
// an unsigned max over the magnitude bits, which vectorises.
inline float max_abs_f32(const float* p, std::int64_t n) {
  std::uint32_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(p[i]) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  return std::bit_cast<float>(m);
}
// No NaN or infinity in p[0, n). Winograd and the fused conv path take finite operands only.
inline bool all_finite_f32(const float* p, std::int64_t n) {
  return std::bit_cast<std::uint32_t>(max_abs_f32(p, n)) < 0x7f800000u;
}

enum class WinogradUse {
  off,        // never
  automatic,  // where it serves the geometry and pays (conv_winograd_pays)
  always,     // wherever it serves the geometry (tests: small channel counts)
};
// Starts as SOMA_CONV_WINOGRAD from the environment (read once; "0" switches it off, anything
// else or unset means automatic). Tests switch it with set_conv_winograd.
WinogradUse conv_winograd_use();
void set_conv_winograd(WinogradUse use);

// Whether Winograd F(2x2, 5x5) can compute the geometry: groups 1, stride 1, dilation 1, a 5x5
// kernel.
bool conv_winograd_supports(const ConvGeometry& g);
// Whether it is faster there than oneDNN's direct kernel: enough input and output channels and
// output pixels, and with more than one thread enough work (measured: docs/performance.md,
// "Winograd F(2x2, 5x5) for 5x5 convolutions").
bool conv_winograd_pays(const ConvGeometry& g);
// Whether conv_winograd_forward takes the geometry under conv_winograd_use() (finite operands
// aside).
bool conv_winograd_applies(const ConvGeometry& g);

// y = act(conv(x, w) + bias) (bias nullptr: none; relu: soma's relu, NaN stays) by Winograd
// when it is built in (oneDNN's matmul computes the GEMMs), the geometry applies and the
// input and weights are all finite (Winograd mixes the values of a tile: an inf in the input
// would give NaN where a direct convolution gives inf). False otherwise, nothing written, and
// the caller runs the direct convolution. The filter transform G w G^T is kept between calls
// and recomputed when `w_storage` (identity and in-place write counter) or `w` changed, like
// the fused path's reordered weights.
bool conv_winograd_forward(const ConvGeometry& g, const float* x, const float* w,
                           const std::shared_ptr<Storage>& w_storage, const float* bias, bool relu,
                           float* y);

// conv_winograd_forward (no bias, no activation) for the training passes (the conv2d op's
// kernel), whose weights change at every step: under automatic use also only where
// conv_winograd_pays_per_step.
bool conv_winograd_train_forward(const ConvGeometry& g, const float* x, const float* w,
                                 const std::shared_ptr<Storage>& w_storage, float* y);
// Whether the batch amortises a filter transform per call (enough output pixels over the batch;
// measured: conv_winograd.cpp).
bool conv_winograd_pays_per_step(const ConvGeometry& g);

// dx of the convolution g (its forward geometry) from dy by Winograd: the backward data pass
// of a 5x5 stride-1 convolution is a forward one of dy with the kernel rotated by 180 degrees,
// input and output channels swapped, pads 4 - p per side (backward_data_geometry; pads above 4
// are left to the direct kernel). Its filter transform has its own cache entry (same weight
// identity rule); a training pass (conv_winograd_pays_per_step applies). False as for
// conv_winograd_forward, nothing written.
bool conv_winograd_backward_data(const ConvGeometry& g, const float* dy, const float* w,
                                 const std::shared_ptr<Storage>& w_storage, float* dx);
// The forward geometry conv_winograd_backward_data computes for the convolution g.
ConvGeometry backward_data_geometry(const ConvGeometry& g);

// How many conv_winograd_forward and conv_winograd_backward_data calls computed the
// convolution, on this thread (tests).
std::uint64_t conv_winograd_calls();
// How many filter transforms ran on this thread (tests check the cache is invalidated).
std::uint64_t conv_winograd_filter_transforms();
// How many Winograd entries (geometry -> GEMM primitive and filter transform) this thread holds.
std::size_t conv_winograd_cache_size();

}  // namespace soma::detail
