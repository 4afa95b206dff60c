// Conv2D's fused inference path (src/nn/conv.cpp, onednn_conv_forward_fused in
// src/backend/cpu/onednn_conv.cpp): act(conv2d(x, w) + b) as one oneDNN primitive with the
// weights kept in its layout between calls. Checked against the separate ops (conv2d + add +
// relu, fast paths off) and a naive f64 convolution; a changed weight is never served stale;
// under a recording tape the separate ops run and gradients stay right.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../../src/backend/cpu/onednn_conv.hpp"
#include "fast_paths_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::rand_tensor;

// f() with the fast paths on (the fused conv) and off (conv2d + add + activation ops).
template <class F>
std::pair<Tensor, Tensor> fused_and_ops(F&& f) {
  return testing::fast_and_generic(std::forward<F>(f));
}
using testing::FastPathsScope;

struct Case {
  std::int64_t n, c, h, w, filters, k;
  Size2 strides;
  Padding padding;
  Size2 dilation;
  std::int64_t groups;
  bool relu, bias;
};

std::string name(const Case& k) {
  return "x[" + std::to_string(k.n) + "," + std::to_string(k.c) + "," + std::to_string(k.h) +
         "," + std::to_string(k.w) + "] f" + std::to_string(k.filters) + " k" +
         std::to_string(k.k) + " s" + std::to_string(k.strides.h) + "x" +
         std::to_string(k.strides.w) + " pad " + k.padding.str() + " d" +
         std::to_string(k.dilation.h) + " g" + std::to_string(k.groups) +
         (k.relu ? " relu" : " linear") + (k.bias ? " bias" : " no-bias");
}

nn::Conv2D seeded_conv(const Case& k, std::uint64_t seed = 11) {
  return nn::Conv2D(k.filters, k.k,
                    {.strides = k.strides,
                     .padding = k.padding,
                     .dilation_rate = k.dilation,
                     .groups = k.groups,
                     .activation = k.relu ? nn::relu : nn::linear,
                     .use_bias = k.bias,
                     .kernel_initializer = nn::init::glorot_uniform(seed),
                     .bias_initializer = nn::init::random_uniform(-0.5, 0.5, seed + 1)});
}

// act(conv(x, w) + b) in f64 with nested loops.
std::vector<double> naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const Case& k) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const auto p = resolve_padding(k.padding, xs[2], xs[3], {ws[2], ws[3]}, k.strides, k.dilation);
  const std::int64_t oh = (xs[2] + p[0] + p[1] - k.dilation.h * (ws[2] - 1) - 1) / k.strides.h + 1;
  const std::int64_t ow = (xs[3] + p[2] + p[3] - k.dilation.w * (ws[3] - 1) - 1) / k.strides.w + 1;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b ? b->to_vector<double>() : std::vector<double>();
  const std::int64_t og = ws[0] / k.groups, cg = ws[1];
  std::vector<double> y;
  for (std::int64_t n = 0; n < xs[0]; ++n)
    for (std::int64_t o = 0; o < ws[0]; ++o)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double acc = b ? bv[std::size_t(o)] : 0.0;
          const std::int64_t g = o / og;
          for (std::int64_t c = 0; c < cg; ++c)
            for (std::int64_t u = 0; u < ws[2]; ++u)
              for (std::int64_t v = 0; v < ws[3]; ++v) {
                const std::int64_t yy = i * k.strides.h - p[0] + u * k.dilation.h;
                const std::int64_t xx = j * k.strides.w - p[2] + v * k.dilation.w;
                if (yy < 0 || yy >= xs[2] || xx < 0 || xx >= xs[3]) continue;
                acc += xv[std::size_t(((n * xs[1] + g * cg + c) * xs[2] + yy) * xs[3] + xx)] *
                       wv[std::size_t(((o * cg + c) * ws[2] + u) * ws[3] + v)];
              }
          y.push_back(k.relu ? std::max(acc, 0.0) : acc);
        }
  return y;
}

::testing::AssertionResult same_with_nan(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << "shapes differ";
  const std::vector<double> p = a.to_vector<double>(), q = b.to_vector<double>();
  for (std::size_t i = 0; i < p.size(); ++i)
    if (!((std::isnan(p[i]) && std::isnan(q[i])) || std::abs(p[i] - q[i]) <= 1e-5))
      return ::testing::AssertionFailure() << "index " << i << ": " << p[i] << " vs " << q[i];
  return ::testing::AssertionSuccess();
}

// oneDNN on (whatever SOMA_CONV_IMPL says) for the test's duration.
class OneDnnOn {
 protected:
  detail::ConvImpl impl_before_ = detail::conv_impl();
  OneDnnOn() { detail::set_conv_impl(detail::ConvImpl::automatic); }
  ~OneDnnOn() { detail::set_conv_impl(impl_before_); }
};

class FusedConv : public ::testing::TestWithParam<Case>, OneDnnOn {
 protected:
  void SetUp() override {
    if (!detail::onednn_conv_built()) GTEST_SKIP() << "soma was built without oneDNN";
  }
};

TEST_P(FusedConv, MatchesTheSeparateOpsAndANaiveConvolution) {
  const Case k = GetParam();
  nn::Conv2D conv = seeded_conv(k);
  const Tensor x = cast(rand_tensor({k.n, k.c, k.h, k.w}, 5), DType::f32);
  NoGradScope no_grad;  // inference, as predict() runs it
  const std::uint64_t calls = detail::onednn_conv_fused_calls();
  const auto [fused, ops] = fused_and_ops([&] { return conv(x); });
  EXPECT_EQ(detail::onednn_conv_fused_calls(), calls + 1) << "the fused path did not run: "
                                                          << name(k);
  EXPECT_TRUE(all_close(fused, ops, 1e-5, 1e-5)) << name(k);
  const Tensor* b = k.bias ? &conv.bias().value() : nullptr;
  EXPECT_TRUE(all_close(fused, naive_conv(x, conv.kernel().value(), b, k), 1e-5, 1e-5))
      << name(k);
  // A NaN in the input: relu and linear keep it, on both paths.
  Tensor xn = x.clone();
  xn.data<float>()[xn.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
  const auto [fused_nan, ops_nan] = fused_and_ops([&] { return conv(xn); });
  EXPECT_TRUE(same_with_nan(fused_nan, ops_nan)) << name(k);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedConv,
    ::testing::Values(Case{1, 1, 28, 28, 32, 5, 1, "same", 1, 1, true, true},   // LeNet 1
                      Case{1, 32, 14, 14, 64, 5, 1, "same", 1, 1, true, true},  // LeNet 2
                      Case{1, 32, 14, 14, 64, 5, 1, "same", 1, 1, false, true},
                      Case{1, 3, 32, 32, 32, 3, 1, "same", 1, 1, true, false},  // CIFAR CNN 1
                      Case{2, 16, 16, 16, 32, 3, 1, "same", 1, 1, false, false},
                      Case{2, 5, 9, 7, 6, 3, {2, 3}, "same", 1, 1, true, true},  // odd, strided
                      Case{2, 4, 11, 10, 6, 3, 2, "valid", 1, 1, false, true},
                      Case{1, 3, 13, 12, 5, 3, 1, {1, 2, 0, 3}, 1, 1, true, true},  // explicit
                      Case{2, 4, 12, 12, 4, 3, 1, "same", 2, 1, true, true},         // dilation
                      Case{2, 6, 9, 9, 9, 3, 1, "same", 1, 3, true, true},           // groups
                      Case{3, 8, 6, 6, 16, 1, 1, "valid", 1, 1, false, true}),       // pointwise
    [](const ::testing::TestParamInfo<Case>& info) { return "case" + std::to_string(info.index); });

class FusedConvBehaviour : public ::testing::Test, OneDnnOn {
 protected:
  void SetUp() override {
    if (!detail::onednn_conv_built()) GTEST_SKIP() << "soma was built without oneDNN";
  }
  const Case lenet2{1, 32, 14, 14, 64, 5, 1, "same", 1, 1, true, true};
};

TEST_F(FusedConvBehaviour, NanInputsStayNaNAfterReluAsTheSeparateOpsDo) {
  nn::Conv2D conv = seeded_conv(lenet2);
  Tensor x = cast(rand_tensor({1, 32, 14, 14}, 6), DType::f32);
  x.data<float>()[100] = std::numeric_limits<float>::quiet_NaN();
  NoGradScope no_grad;
  const auto [fused, ops] = fused_and_ops([&] { return conv(x); });
  EXPECT_TRUE(same_with_nan(fused, ops));
  EXPECT_TRUE(std::isnan(sum(fused).item<double>()));  // relu keeps NaN (issue 19)
  // Without the activation the NaNs stay too, on both paths.
  Case linear = lenet2;
  linear.relu = false;
  nn::Conv2D conv2 = seeded_conv(linear);
  const auto [fused2, ops2] = fused_and_ops([&] { return conv2(x); });
  EXPECT_TRUE(std::isnan(sum(fused2).item<double>()));
  EXPECT_TRUE(same_with_nan(fused2, ops2));
}

TEST_F(FusedConvBehaviour, AnAssignedKernelGivesTheNewResultNotTheCachedLayout) {
  nn::Conv2D conv = seeded_conv(lenet2);
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 7), DType::f32);
  NoGradScope no_grad;
  const Tensor before = conv(x);
  Variable kernel = conv.kernel();  // a handle on the layer's kernel
  kernel.assign(kernel.value() * 2.0);  // in place: same storage, new version
  const Tensor after = conv(x);
  EXPECT_TRUE(all_close(after, naive_conv(x, conv.kernel().value(), &conv.bias().value(), lenet2),
                        1e-5, 1e-5));
  EXPECT_FALSE(all_close(after, before, 1e-3, 1e-3));
}

TEST_F(FusedConvBehaviour, AnOptimiserStepIsSeenByTheNextCall) {
  nn::Conv2D conv = seeded_conv(lenet2);
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 8), DType::f32);
  {
    NoGradScope no_grad;
    conv(x);  // builds the layer and caches its kernel's layout
  }
  auto opt = optim::SGD({.learning_rate = 0.1});
  Tensor g = cast(rand_tensor(conv.kernel().shape(), 9), DType::f32);
  opt.apply_gradients({g}, {conv.kernel()});
  NoGradScope no_grad;
  const Tensor y = conv(x);
  EXPECT_TRUE(all_close(y, naive_conv(x, conv.kernel().value(), &conv.bias().value(), lenet2),
                        1e-5, 1e-5));
}

TEST_F(FusedConvBehaviour, LayersOfOneGeometryEachGetTheirOwnKernel) {
  // One cached primitive serves both layers; each call must use its own layer's weights, also
  // when a kernel's storage is freed and a new one may take its address.
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 10), DType::f32);
  NoGradScope no_grad;
  nn::Conv2D a = seeded_conv(lenet2, 21), b = seeded_conv(lenet2, 31);
  for (int round = 0; round < 2; ++round) {
    const Tensor ya = a(x), yb = b(x);
    EXPECT_TRUE(all_close(ya, naive_conv(x, a.kernel().value(), &a.bias().value(), lenet2),
                          1e-5, 1e-5));
    EXPECT_TRUE(all_close(yb, naive_conv(x, b.kernel().value(), &b.bias().value(), lenet2),
                          1e-5, 1e-5));
  }
  for (std::uint64_t seed = 40; seed < 44; ++seed) {
    nn::Conv2D c = seeded_conv(lenet2, seed);
    const Tensor y = c(x);
    EXPECT_TRUE(all_close(y, naive_conv(x, c.kernel().value(), &c.bias().value(), lenet2),
                          1e-5, 1e-5))
        << "seed " << seed;
  }
}

TEST_F(FusedConvBehaviour, AStorageReallocatedAtTheSameAddressIsNotTakenForTheOld) {
  // A kernel freed and a new one allocated at the same address, both at version 0: the cached
  // layout must not be reused. Simulated on the backend entry point: the same data pointer with
  // new contents, passed with a different storage.
  const Case k{1, 8, 6, 6, 16, 3, 1, "same", 1, 1, false, false};
  const Tensor x = cast(rand_tensor({1, 8, 6, 6}, 16), DType::f32);
  Tensor w = cast(rand_tensor({16, 8, 3, 3}, 17), DType::f32);
  const Tensor other = cast(rand_tensor({16, 8, 3, 3}, 18), DType::f32);
  ASSERT_EQ(w.storage()->version.load(), other.storage()->version.load());
  const detail::ConvGeometry g{1, 8, 6, 6, 16, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  Tensor y = Tensor::empty({1, 16, 6, 6});
  ASSERT_TRUE(detail::onednn_conv_forward_fused(g, x.data<float>(), w.data<float>(), w.storage(),
                                                nullptr, false, y.data<float>()));
  EXPECT_TRUE(all_close(y, naive_conv(x, w, nullptr, k), 1e-5, 1e-5));
  const Tensor w2 = cast(rand_tensor({16, 8, 3, 3}, 19), DType::f32);
  std::copy_n(w2.data<float>(), w2.numel(), w.data<float>());  // new contents, same address
  ASSERT_TRUE(detail::onednn_conv_forward_fused(g, x.data<float>(), w.data<float>(),
                                                other.storage(), nullptr, false,
                                                y.data<float>()));
  EXPECT_TRUE(all_close(y, naive_conv(x, w2, nullptr, k), 1e-5, 1e-5));
}

// Under a tape the layer runs its fused training op (conv2d_bias_act), whose gradients are the
// separate ops'.
TEST_F(FusedConvBehaviour, UnderARecordingTapeGradientsMatchTheSeparateOps) {
  nn::Conv2D conv = seeded_conv(lenet2);
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 12), DType::f32);
  {
    NoGradScope no_grad;
    conv(x);
  }
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  const Tensor loss = sum(conv(x) * conv(x));
  const Tensor gx = tape.gradient(loss, x);
  const Tensor gk = tape.gradient(loss, conv.kernel().value());
  const Tensor gb = tape.gradient(loss, conv.bias().value());
  ASSERT_TRUE(gk.defined() && gb.defined()) << "no gradient was recorded";
  // The same loss written with the ops directly.
  GradientTape tape2(/*persistent=*/true);
  tape2.watch(x);
  const Tensor w = conv.kernel().value(), b = conv.bias().value();
  const Tensor y = relu(conv2d(x, w, 1, "same") + reshape(b, {1, 64, 1, 1}));
  const Tensor loss2 = sum(y * y);
  EXPECT_TRUE(all_close(gx, tape2.gradient(loss2, x), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(gk, tape2.gradient(loss2, w), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(gb, tape2.gradient(loss2, b), 1e-4, 1e-4));
}

TEST_F(FusedConvBehaviour, F64LayerRunsTheOpsWhoseGradientsMatchFiniteDifferences) {
  // f64 never takes the fused path; the layer's gradients through the separate ops, checked
  // with central differences in x, the kernel and the bias.
  Case k{1, 2, 6, 6, 3, 3, 1, "same", 1, 1, true, true};
  nn::Conv2D conv = nn::Conv2D(k.filters, k.k,
                               {.padding = k.padding,
                                .activation = nn::relu,
                                .kernel_initializer = nn::init::glorot_uniform(3),
                                .bias_initializer = nn::init::random_uniform(-0.5, 0.5, 4),
                                .dtype = DType::f64});
  const Tensor x = rand_tensor({1, 2, 6, 6}, 13);
  conv(x);
  const Tensor w = conv.kernel().value(), b = conv.bias().value();
  EXPECT_TRUE(testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        return relu(conv2d(in[0], in[1], 1, "same") + reshape(in[2], {1, 3, 1, 1}));
      },
      {x, w, b}));
  // The layer computes the same as the ops above, under a tape.
  GradientTape tape;
  tape.watch(x);
  const Tensor y = conv(x);
  EXPECT_TRUE(all_close(y, naive_conv(x, w, &b, k), 1e-12, 1e-12));
  EXPECT_TRUE(tape.gradient(sum(y), x).defined());
}

TEST_F(FusedConvBehaviour, ACustomActivationNamedReluIsNotReplaced) {
  const nn::Activation twice("relu", [](const Tensor& t) { return t * 2.0; });
  nn::Conv2D conv(4, 3, {.activation = twice, .use_bias = false,
                         .kernel_initializer = nn::init::glorot_uniform(13)});
  const Tensor x = cast(rand_tensor({1, 2, 7, 7}, 14), DType::f32);
  NoGradScope no_grad;
  const Tensor y = conv(x);
  EXPECT_TRUE(all_close(y, conv2d(x, conv.kernel().value()) * 2.0, 1e-5, 1e-5));
}

TEST_F(FusedConvBehaviour, Im2colSwitchFallsBackToTheOps) {
  nn::Conv2D conv = seeded_conv(lenet2);
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 15), DType::f32);
  NoGradScope no_grad;
  conv(x);
  const detail::ConvImpl before = detail::conv_impl();
  detail::set_conv_impl(detail::ConvImpl::im2col);
  const std::uint64_t calls = detail::onednn_conv_fused_calls();
  const Tensor y = conv(x);
  detail::set_conv_impl(before);
  EXPECT_EQ(detail::onednn_conv_fused_calls(), calls);
  EXPECT_TRUE(all_close(y, naive_conv(x, conv.kernel().value(), &conv.bias().value(), lenet2),
                        1e-5, 1e-5));
}

}  // namespace
}  // namespace soma
