#pragma once
// Internal: how a soma convolution or pooling maps onto the CUDA backend, as plain C++ (no CUDA
// or cuDNN header) so that tests/unit/test_cuda_conv_plan.cpp checks it on the CPU against the
// ops' infer rules for every padding mode, stride and dilation.
//
// soma's ops are NCHW with explicit padding {top, bottom, left, right}, which is asymmetric for
// "same" padding whenever the total is odd (the odd row/column goes after, as in TensorFlow).
// cuDNN's legacy convolution descriptor takes one symmetric padding per axis. The plan gives cuDNN
// the smaller of the two amounts and adds the difference as explicit zero rows/columns around
// the input (a padded copy; convolution padding is zeros, so the result is the same):
//   conv2d / conv2d_bias_act / conv2d_backprop_filter read the padded copy of x;
//   conv2d_backprop_input computes the gradient of the padded input and crops it.
// Symmetric padding (valid, explicit symmetric, "same" with an even total) needs no copy.
// Pooling runs on soma's own kernels (conv_pool.cu), which take the asymmetric padding as is.
#include <cstdint>
#include <vector>

#include "conv_pool_index.hpp"  // same directory: the CPU test includes this header by path

namespace soma::cuda_detail {

struct ConvPlan {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  // input
  std::int64_t o = 0, kh = 0, kw = 0, groups = 1;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pad_h = 0, pad_w = 0;  // the symmetric padding cuDNN gets
  // Explicit zeros around the input, so that cuDNN's padding is symmetric.
  std::int64_t extra_top = 0, extra_bottom = 0, extra_left = 0, extra_right = 0;
  std::int64_t hp = 0, wp = 0;  // the input's height and width as cuDNN sees it
  std::int64_t oh = 0, ow = 0;  // the output's, by cuDNN's formula

  bool explicit_padding() const {
    return extra_top != 0 || extra_bottom != 0 || extra_left != 0 || extra_right != 0;
  }
  // x [n, c, h, w] -> the padded copy [n, c, hp, wp].
  WindowCopy pad_input() const { return {n * c, h, w, hp, wp, -extra_top, -extra_left}; }
  // The padded input's gradient [n, c, hp, wp] -> dx [n, c, h, w].
  WindowCopy crop_input() const { return {n * c, hp, wp, h, w, extra_top, extra_left}; }
};

// cuDNN's output length (cudnnGetConvolution2dForwardOutputDim).
inline std::int64_t cudnn_conv_out(std::int64_t in, std::int64_t pad, std::int64_t k,
                                   std::int64_t stride, std::int64_t dilation) {
  return 1 + (in + 2 * pad - ((k - 1) * dilation + 1)) / stride;
}

// x: [N, C, H, W], k: [O, C/groups, KH, KW]; strides {sh, sw}, pads {t, b, l, r}, dilation
// {dh, dw}: the op's attributes, already checked by its infer rule.
inline ConvPlan plan_conv(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& k,
                          const std::vector<std::int64_t>& strides,
                          const std::vector<std::int64_t>& pads,
                          const std::vector<std::int64_t>& dilation, std::int64_t groups) {
  ConvPlan p;
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3];
  p.o = k[0], p.kh = k[2], p.kw = k[3], p.groups = groups;
  p.sh = strides[0], p.sw = strides[1], p.dh = dilation[0], p.dw = dilation[1];
  p.pad_h = pads[0] < pads[1] ? pads[0] : pads[1];
  p.pad_w = pads[2] < pads[3] ? pads[2] : pads[3];
  p.extra_top = pads[0] - p.pad_h, p.extra_bottom = pads[1] - p.pad_h;
  p.extra_left = pads[2] - p.pad_w, p.extra_right = pads[3] - p.pad_w;
  p.hp = p.h + p.extra_top + p.extra_bottom;
  p.wp = p.w + p.extra_left + p.extra_right;
  p.oh = cudnn_conv_out(p.hp, p.pad_h, p.kh, p.sh, p.dh);
  p.ow = cudnn_conv_out(p.wp, p.pad_w, p.kw, p.sw, p.dw);
  return p;
}

// x: [N, C, H, W]; pool {ph, pw}, strides {sh, sw}, pads {t, b, l, r} (checked by the infer rule).
inline PoolDims plan_pool(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& pool,
                          const std::vector<std::int64_t>& strides,
                          const std::vector<std::int64_t>& pads, bool count_pad = false) {
  PoolDims p;
  p.count_pad = count_pad;
  p.planes = x[0] * x[1], p.h = x[2], p.w = x[3];
  p.ph = pool[0], p.pw = pool[1], p.sh = strides[0], p.sw = strides[1];
  p.pt = pads[0], p.pl = pads[2];
  p.oh = 1 + (p.h + pads[0] + pads[1] - p.ph) / p.sh;
  p.ow = 1 + (p.w + pads[2] + pads[3] - p.pw) / p.sw;
  return p;
}

}  // namespace soma::cuda_detail
