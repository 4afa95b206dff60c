#pragma once
// Convolution and pooling ops, NCHW throughout. Kernels are OIHW: [out, in/groups, kh, kw].
// Every op here has a gradient made of ops from this header, so gradients of gradients work.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "soma/tensor.hpp"

namespace soma {

// A (height, width) pair; one number means the same for both: `2` or `{2, 3}`.
struct Size2 {
  std::int64_t h = 1, w = 1;
  Size2() = default;
  Size2(std::int64_t v) : h(v), w(v) {}  // NOLINT: implicit, as Keras takes an int or a pair
  Size2(std::int64_t h_, std::int64_t w_) : h(h_), w(w_) {}
  bool operator==(const Size2&) const = default;
};

// "valid" (no padding), "same" (TensorFlow's rule: output = ceil(input / stride), the odd extra
// row/column of padding at the bottom/right) or explicit amounts: `1` (all sides), `{1, 2}`
// (top/bottom, left/right) or `{top, bottom, left, right}`.
class Padding {
 public:
  enum class Mode { valid, same, explicit_ };
  Padding(const char* mode);         // NOLINT
  Padding(const std::string& mode);  // NOLINT
  Padding(int p) : Padding(std::int64_t(p)) {}  // NOLINT: exact match for a literal 0
  Padding(std::int64_t p);                      // NOLINT
  Padding(std::int64_t vertical, std::int64_t horizontal);
  Padding(std::int64_t top, std::int64_t bottom, std::int64_t left, std::int64_t right);

  Mode mode() const { return mode_; }
  const std::array<std::int64_t, 4>& pads() const { return pads_; }  // explicit mode only
  std::string str() const;  // "valid", "same" or "[t, b, l, r]"

 private:
  Mode mode_ = Mode::valid;
  std::array<std::int64_t, 4> pads_{};
};

// The padding {top, bottom, left, right} that `padding` means for a window of (dilated) extent
// k sliding with stride s over an input of h x w.
std::array<std::int64_t, 4> resolve_padding(const Padding& padding, std::int64_t h,
                                            std::int64_t w, Size2 kernel, Size2 strides,
                                            Size2 dilation = 1);

// x [N, C, H, W], w [O, C/groups, KH, KW] -> [N, O, H', W'] with
// H' = 1 + (H + pt + pb - dh*(KH-1) - 1) / sh (floor), the same for W'.
Tensor conv2d(const Tensor& x, const Tensor& w, Size2 strides = 1,
              const Padding& padding = "valid", Size2 dilation = 1, std::int64_t groups = 1);
// 1-d convolution: x [N, C, W], w [O, C/groups, K] -> [N, O, W'] (PyTorch's Conv1d layout),
// as conv2d over a height-1 image, so it has conv2d's kernels and gradients. Explicit padding
// uses the Padding's left/right amounts (`2` pads 2 on both sides).
Tensor conv1d(const Tensor& x, const Tensor& w, std::int64_t stride = 1,
              const Padding& padding = "valid", std::int64_t dilation = 1,
              std::int64_t groups = 1);
// 3-d convolution: x [N, C, D, H, W], w [O, C/groups, KD, KH, KW] -> [N, O, D', H', W']
// (PyTorch's Conv3d layout), D' = 1 + (D + front + back - dd*(KD-1) - 1) / sd (floor), the same
// for H' and W'. pads: {front, back, top, bottom, left, right}; strides and dilation
// {d, h, w}. Written as one conv2d with the kernel's depth taps folded into the channels and
// the output depths into the batch: it has conv2d's kernels (oneDNN, cuDNN) and gradients.
Tensor conv3d(const Tensor& x, const Tensor& w, std::array<std::int64_t, 3> strides = {1, 1, 1},
              std::array<std::int64_t, 6> pads = {0, 0, 0, 0, 0, 0},
              std::array<std::int64_t, 3> dilation = {1, 1, 1}, std::int64_t groups = 1);
// The output shape of conv2d for these shapes (checks them as conv2d does).
Shape conv2d_output_shape(const Shape& x, const Shape& w, Size2 strides = 1,
                          const Padding& padding = "valid", Size2 dilation = 1,
                          std::int64_t groups = 1);

// The gradient of conv2d with respect to its input: g [N, O, H', W'] -> [N, C, H, W]
// (`input_shape`, since strides > 1 make H ambiguous). Linear in g and in w.
Tensor conv2d_backprop_input(const Tensor& g, const Tensor& w, const Shape& input_shape,
                             Size2 strides = 1, const Padding& padding = "valid",
                             Size2 dilation = 1, std::int64_t groups = 1);
// The gradient of conv2d with respect to its kernel: (x, g) -> [O, C/groups, KH, KW].
Tensor conv2d_backprop_filter(const Tensor& x, const Tensor& g, const Shape& filter_shape,
                              Size2 strides = 1, const Padding& padding = "valid",
                              Size2 dilation = 1, std::int64_t groups = 1);

// Transposed convolution (Keras Conv2DTranspose, NCHW): x [N, C_in, H, W],
// w [C_in, C_out/groups, KH, KW] (PyTorch's ConvTranspose2d layout) -> [N, C_out, H_out, W_out].
// It is conv2d_backprop_input with x as the gradient. H_out follows Keras:
//   no output_padding: valid -> H*s + max(k_eff - s, 0), same -> H*s
//   output_padding op: (H-1)*s + k_eff - 2*(k_eff/2 for same, 0 for valid) + op
//   explicit pads:     (H-1)*s + k_eff - pt - pb + op
// where k_eff = (KH-1)*dh + 1. output_padding must be smaller than the stride.
Tensor conv2d_transpose(const Tensor& x, const Tensor& w, Size2 strides = 1,
                        const Padding& padding = "valid",
                        std::optional<Size2> output_padding = std::nullopt, Size2 dilation = 1,
                        std::int64_t groups = 1);

// Pooling over H and W of x [N, C, H, W]; strides default to the pool size. Max pooling ignores
// padding; average pooling divides by the number of real (unpadded) elements, as TensorFlow does
// and as ONNX's default count_include_pad = 0. count_include_pad = true divides by the whole
// window, padding counted as zeros: PyTorch's default (nn.AvgPool2d(count_include_pad=True)).
Tensor max_pool2d(const Tensor& x, Size2 pool_size, std::optional<Size2> strides = std::nullopt,
                  const Padding& padding = "valid");
Tensor avg_pool2d(const Tensor& x, Size2 pool_size, std::optional<Size2> strides = std::nullopt,
                  const Padding& padding = "valid", bool count_include_pad = false);
// Max pooling that also returns where each maximum came from: {y, indices}, indices i64 of y's
// shape holding the offset h * W + w of each window's first maximum within its (n, c) plane of
// x (PyTorch's return_indices=True; ONNX MaxPool's Indices add n * C*H*W + c * H*W). y's
// gradient goes to those positions.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 pool_size,
                                                  std::optional<Size2> strides = std::nullopt,
                                                  const Padding& padding = "valid");
// The partial inverse of max_pool2d_with_indices: zeros of output_size ([H, W] or
// [N, C, H, W]) with each x[n, c, i, j] written at offset indices[n, c, i, j] of plane (n, c)
// (PyTorch's max_unpool2d given output_size; a repeated index keeps the last in row-major
// order). Its gradient reads the incoming gradient back at the indices.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Shape& output_size);
Shape pool2d_output_shape(const Shape& x, Size2 pool_size,
                          std::optional<Size2> strides = std::nullopt,
                          const Padding& padding = "valid");

// Pooling gradients (ops, so they are differentiable too). max_pool2d_grad sends each g to the
// first maximum of its window of x; avg_pool2d_grad spreads g evenly over the window.
Tensor max_pool2d_grad(const Tensor& x, const Tensor& g, Size2 pool_size,
                       std::optional<Size2> strides = std::nullopt,
                       const Padding& padding = "valid");
Tensor avg_pool2d_grad(const Tensor& g, const Shape& input_shape, Size2 pool_size,
                       std::optional<Size2> strides = std::nullopt,
                       const Padding& padding = "valid", bool count_include_pad = false);

// Scaled dot-product attention: softmax(scale * q k^T + mask) v over q [B, H, Sq, D],
// k [B, H, Sk, D], v [B, H, Sk, Dv] -> [B, H, Sq, Dv]. The mask (may be undefined) broadcasts to
// [B, H, Sq, Sk]: boolean (true: the key takes part) or additive in q's dtype (its gradient is
// computed). `causal` lets query i see keys j <= i. The CPU kernel streams over blocks of keys
// (online softmax) and never holds the [Sq, Sk] matrix; a fully masked row gives zeros.
// docs/attention.md.
struct AttentionOptions {
  bool causal = false;
  std::optional<double> scale;  // default 1/sqrt(D)
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = Tensor(),
                                    const AttentionOptions& options = {});

}  // namespace soma
