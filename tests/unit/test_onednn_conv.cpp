// The oneDNN convolution path (src/backend/cpu/onednn_conv.cpp) against the im2col + BLAS path
// (itself checked against nested loops in test_conv_ops): forward, backprop-input and
// backprop-filter in f32 over strides, padding, dilation, groups, batch 1 and odd sizes.
#include <string>

#include "../../src/backend/cpu/onednn_conv.hpp"
#include "soma/nn_ops.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using detail::ConvImpl;
using testing::all_close;
using testing::rand_tensor;

struct Case {
  std::int64_t n, c, h, w, o, kh, kw;
  Size2 strides;
  Padding padding;
  Size2 dilation;
  std::int64_t groups;
};

std::string name(const Case& k) {
  return "x[" + std::to_string(k.n) + "," + std::to_string(k.c) + "," + std::to_string(k.h) +
         "," + std::to_string(k.w) + "] w[" + std::to_string(k.o) + "," +
         std::to_string(k.c / k.groups) + "," + std::to_string(k.kh) + "," +
         std::to_string(k.kw) + "] s" + std::to_string(k.strides.h) + "x" +
         std::to_string(k.strides.w) + " pad " + k.padding.str() + " d" +
         std::to_string(k.dilation.h) + "x" + std::to_string(k.dilation.w) + " g" +
         std::to_string(k.groups);
}

const Case kCases[] = {
    {2, 3, 8, 8, 4, 3, 3, 1, "valid", 1, 1},
    {2, 3, 8, 8, 4, 3, 3, 1, "same", 1, 1},
    {1, 1, 28, 28, 32, 5, 5, 1, "same", 1, 1},     // LeNet's first layer, batch 1
    {3, 32, 14, 14, 64, 5, 5, 1, "same", 1, 1},    // LeNet's second layer
    {2, 16, 16, 16, 32, 3, 3, 1, "same", 1, 1},    // CIFAR CNN-like, blocked layouts
    {2, 5, 9, 7, 6, 3, 2, {2, 3}, "same", 1, 1},   // odd sizes, anisotropic strides
    {2, 4, 11, 10, 6, 3, 3, 2, "valid", 1, 1},
    {1, 3, 13, 12, 5, 3, 3, 1, {1, 2, 0, 3}, 1, 1},  // asymmetric explicit padding
    {2, 4, 12, 12, 4, 3, 3, 1, "same", 2, 1},      // dilation
    {2, 4, 15, 13, 6, 3, 3, 2, "same", {2, 3}, 1},  // dilation with stride
    {2, 6, 9, 9, 9, 3, 3, 1, "same", 1, 3},        // groups
    {2, 8, 7, 7, 8, 3, 3, 1, "same", 1, 8},        // depthwise
    {2, 32, 8, 8, 64, 3, 3, 2, "valid", 1, 2},     // groups with blocked channels
    {3, 8, 6, 6, 16, 1, 1, 1, "valid", 1, 1},      // pointwise
    {1, 2, 5, 5, 3, 5, 5, 1, "valid", 1, 1},       // kernel as large as the input
};

// Runs f under the given implementation, restoring the previous one.
template <class F>
Tensor with_impl(ConvImpl impl, F&& f) {
  const ConvImpl before = detail::conv_impl();
  detail::set_conv_impl(impl);
  Tensor r = f();
  detail::set_conv_impl(before);
  return r;
}

class OneDnnConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::onednn_conv_built()) GTEST_SKIP() << "soma was built without oneDNN";
  }
};

TEST_F(OneDnnConv, ForwardMatchesIm2col) {
  std::uint64_t seed = 1;
  for (const Case& k : kCases) {
    Tensor x = rand_tensor({k.n, k.c, k.h, k.w}, seed++, -1, 1, DType::f32);
    Tensor w = rand_tensor({k.o, k.c / k.groups, k.kh, k.kw}, seed++, -1, 1, DType::f32);
    auto f = [&] { return conv2d(x, w, k.strides, k.padding, k.dilation, k.groups); };
    Tensor ref = with_impl(ConvImpl::im2col, f), got = with_impl(ConvImpl::automatic, f);
    EXPECT_TRUE(all_close(got, ref, 1e-4, 1e-4)) << name(k);
  }
}

TEST_F(OneDnnConv, BackpropInputMatchesIm2col) {
  std::uint64_t seed = 100;
  for (const Case& k : kCases) {
    const Shape xs{k.n, k.c, k.h, k.w};
    Tensor w = rand_tensor({k.o, k.c / k.groups, k.kh, k.kw}, seed++, -1, 1, DType::f32);
    const Shape ys = conv2d_output_shape(xs, w.shape(), k.strides, k.padding, k.dilation,
                                         k.groups);
    Tensor g = rand_tensor(ys, seed++, -1, 1, DType::f32);
    auto f = [&] {
      return conv2d_backprop_input(g, w, xs, k.strides, k.padding, k.dilation, k.groups);
    };
    Tensor ref = with_impl(ConvImpl::im2col, f), got = with_impl(ConvImpl::automatic, f);
    EXPECT_TRUE(all_close(got, ref, 1e-4, 1e-4)) << name(k);
  }
}

TEST_F(OneDnnConv, BackpropFilterMatchesIm2col) {
  std::uint64_t seed = 200;
  for (const Case& k : kCases) {
    Tensor x = rand_tensor({k.n, k.c, k.h, k.w}, seed++, -1, 1, DType::f32);
    const Shape ws{k.o, k.c / k.groups, k.kh, k.kw};
    const Shape ys = conv2d_output_shape(x.shape(), ws, k.strides, k.padding, k.dilation,
                                         k.groups);
    Tensor g = rand_tensor(ys, seed++, -1, 1, DType::f32);
    auto f = [&] {
      return conv2d_backprop_filter(x, g, ws, k.strides, k.padding, k.dilation, k.groups);
    };
    Tensor ref = with_impl(ConvImpl::im2col, f), got = with_impl(ConvImpl::automatic, f);
    EXPECT_TRUE(all_close(got, ref, 1e-4, 1e-4)) << name(k);
  }
}

// The comparisons above must not pass by both sides running im2col: oneDNN takes these cases.
TEST_F(OneDnnConv, OneDnnRunsTheF32Cases) {
  const detail::ConvGeometry g{2, 3, 8, 8, 4, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  Tensor x = rand_tensor({2, 3, 8, 8}, 7, -1, 1, DType::f32);
  Tensor w = rand_tensor({4, 3, 3, 3}, 8, -1, 1, DType::f32);
  Tensor y = Tensor::empty({2, 4, 8, 8}, DType::f32);
  ASSERT_TRUE(detail::onednn_conv_forward(g, x.data<float>(), w.data<float>(), y.data<float>()));
  EXPECT_TRUE(all_close(y, conv2d(x, w, 1, "same"), 1e-5, 1e-5));
  Tensor dx = Tensor::empty({2, 3, 8, 8}, DType::f32), dw = Tensor::empty({4, 3, 3, 3}, DType::f32);
  EXPECT_TRUE(
      detail::onednn_conv_backward_data(g, y.data<float>(), w.data<float>(), dx.data<float>()));
  EXPECT_TRUE(
      detail::onednn_conv_backward_weights(g, x.data<float>(), y.data<float>(), dw.data<float>()));
}

TEST_F(OneDnnConv, SwitchedOffFallsBackToIm2col) {
  const detail::ConvGeometry g{1, 1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 1};
  std::vector<float> x(16, 1.f), w(9, 1.f), y(4, 0.f);
  with_impl(ConvImpl::im2col, [&] {
    EXPECT_FALSE(detail::onednn_conv_forward(g, x.data(), w.data(), y.data()));
    return Tensor();
  });
}

// A training-shaped sequence: the same geometry again (cached primitive) with new data.
TEST_F(OneDnnConv, CachedPrimitiveTakesNewData) {
  for (std::uint64_t seed : {11, 12, 13}) {
    Tensor x = rand_tensor({4, 8, 10, 10}, seed, -1, 1, DType::f32);
    Tensor w = rand_tensor({16, 8, 3, 3}, seed + 50, -1, 1, DType::f32);
    auto f = [&] { return conv2d(x, w, 1, "same"); };
    EXPECT_TRUE(all_close(with_impl(ConvImpl::automatic, f), with_impl(ConvImpl::im2col, f),
                          1e-4, 1e-4));
  }
}

// More geometries than the per-thread cache keeps: it starts over and stays correct.
TEST_F(OneDnnConv, ManyShapesOverflowTheCache) {
  for (std::int64_t n = 1; n <= 70; ++n) {
    Tensor x = rand_tensor({n, 2, 5, 5}, std::uint64_t(n), -1, 1, DType::f32);
    Tensor w = rand_tensor({3, 2, 3, 3}, std::uint64_t(n) + 500, -1, 1, DType::f32);
    auto f = [&] { return conv2d(x, w, 1, "same"); };
    ASSERT_TRUE(all_close(with_impl(ConvImpl::automatic, f), with_impl(ConvImpl::im2col, f),
                          1e-4, 1e-4))
        << "batch " << n;
  }
}

}  // namespace
}  // namespace soma
