#pragma once
// Internal: CPU convolution through oneDNN (src/backend/cpu/onednn_conv.cpp), used by the conv
// kernels in nn.cpp when soma is built with oneDNN (SOMA_HAS_ONEDNN) and the case is supported;
// otherwise those kernels run im2col + BLAS. Tests switch implementations to compare them.
#include <cstdint>
#include <memory>

namespace soma {
struct Storage;
}

namespace soma::detail {

// Geometry of one 2-D convolution on packed NCHW input, [O, C/groups, KH, KW] kernel and NCHW
// output (pads are explicit top/bottom/left/right, dilation 1 = dense).
struct ConvGeometry {
  std::int64_t n, c, h, w;
  std::int64_t o, kh, kw;
  std::int64_t oh, ow;
  std::int64_t sh, sw;
  std::int64_t pt, pb, pl, pr;
  std::int64_t dh, dw;
  std::int64_t groups;
};

enum class ConvImpl {
  automatic,  // oneDNN where built in and supported, else im2col
  im2col,     // always im2col + BLAS
};

// Starts as SOMA_CONV_IMPL from the environment ("im2col" or "auto"; unset means auto).
ConvImpl conv_impl();
void set_conv_impl(ConvImpl impl);

// True when soma was built with oneDNN.
bool onednn_conv_built();

// f32 convolution through oneDNN when conv_impl() allows it; false when it does not (not built,
// switched off, or a case oneDNN rejects), and the caller runs im2col instead.
// The forward and backward data passes of 5x5 stride-1 convolutions go to Winograd
// (conv_winograd.hpp) where it applies and not under bf16 autocast; `w_storage` (the weight
// tensor's storage, may be null) keys its filter transform as in onednn_conv_forward_fused.
bool onednn_conv_forward(const ConvGeometry& g, const float* x, const float* w, float* y,
                         const std::shared_ptr<Storage>& w_storage = nullptr);
bool onednn_conv_backward_data(const ConvGeometry& g, const float* dy, const float* w, float* dx,
                               const std::shared_ptr<Storage>& w_storage = nullptr);
bool onednn_conv_backward_weights(const ConvGeometry& g, const float* x, const float* dy,
                                  float* dw);

// Inference forward y = act(conv(x, w) + bias) in one oneDNN primitive: the bias as the
// primitive's bias argument (nullptr: none) and ReLU (relu = true) as an eltwise post-op when
// the operands are finite (else after the primitive, so that NaN propagates as in soma's relu).
// The weights reordered into the primitive's layout are kept between calls and reused while
// `w_storage` (the weight tensor's storage: identity, and its version counter of in-place
// writes) and `w` are the same, so a weight changed by an optimiser step, a Variable::assign or
// load_weights is reordered again. False as for onednn_conv_forward (the
// caller then runs the separate ops).
bool onednn_conv_forward_fused(const ConvGeometry& g, const float* x, const float* w,
                               const std::shared_ptr<Storage>& w_storage, const float* bias,
                               bool relu, float* y);
// How many onednn_conv_forward_fused calls ran on this thread (tests check the path is taken).
std::uint64_t onednn_conv_fused_calls();

// A 3-d convolution on packed NCDHW input, [O, C/groups, KD, KH, KW] kernel and NCDHW output
// (pads explicit per axis, dilation 1 = dense): the conv3d ops' CPU kernels
// (src/backend/cpu/conv3d.cpp). The same contract as the 2-d functions above.
struct Conv3dGeometry {
  std::int64_t n, c, d, h, w;
  std::int64_t o, kd, kh, kw;
  std::int64_t od, oh, ow;
  std::int64_t sd, sh, sw;
  std::int64_t pf, pbk, pt, pb, pl, pr;  // front, back, top, bottom, left, right
  std::int64_t dd, dh, dw;
  std::int64_t groups;
};
bool onednn_conv3d_forward(const Conv3dGeometry& g, const float* x, const float* w, float* y);
bool onednn_conv3d_backward_data(const Conv3dGeometry& g, const float* dy, const float* w,
                                 float* dx);
bool onednn_conv3d_backward_weights(const Conv3dGeometry& g, const float* x, const float* dy,
                                    float* dw);
// How many 3-d primitives ran on this thread (tests check the path is taken).
std::uint64_t onednn_conv3d_calls();

}  // namespace soma::detail
