// Conv2D's fused forward op conv2d_bias_act(x, w, b) = act(conv2d(x, w) + b), act linear or ReLU
// (issue 5): against the separate ops and a naive f64 convolution, gradients against finite
// differences in f64 and against the separate ops' in f32, the layer's use of it under a tape,
// and its errors.
#include <cmath>
#include <limits>
#include <string>

#include "../../src/backend/cpu/onednn_conv.hpp"
#include "../../src/internal/conv_bias_act.hpp"
#include "fast_paths_testing.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::rand_tensor;

struct Geometry {
  std::int64_t n, c, h, w, o, k;
  Size2 strides;
  std::string padding;
  Size2 dilation;
  std::int64_t groups;
};

const Geometry kGeometries[] = {
    {2, 1, 12, 12, 8, 5, 1, "same", 1, 1},   // LeNet's first layer, smaller
    {1, 6, 9, 7, 4, 3, 2, "valid", 1, 1},    // strided, odd sizes
    {2, 4, 8, 8, 6, 3, 1, "same", 2, 2},     // dilated, grouped
    {1, 3, 5, 5, 2, 1, 1, "valid", 1, 1},    // pointwise
};

Tensor separate(const Tensor& x, const Tensor& w, const Tensor& b, const Geometry& g, bool relu_act) {
  Tensor y = conv2d(x, w, g.strides, g.padding, g.dilation, g.groups) +
             reshape(b, {1, b.shape()[0], 1, 1});
  return relu_act ? relu(y) : y;
}
Tensor fused(const Tensor& x, const Tensor& w, const Tensor& b, const Geometry& g, bool relu_act) {
  return detail::conv2d_bias_act(x, w, b, g.strides, g.padding, g.dilation, g.groups, relu_act);
}

// Naive f64 reference: direct loops over the explicit padding the op resolved.
Tensor naive(const Tensor& x, const Tensor& w, const Tensor& b, const Geometry& g, bool relu_act) {
  const auto p = resolve_padding(g.padding, g.h, g.w, {g.k, g.k}, g.strides, g.dilation);
  const std::int64_t oh = (g.h + p[0] + p[1] - g.dilation.h * (g.k - 1) - 1) / g.strides.h + 1;
  const std::int64_t ow = (g.w + p[2] + p[3] - g.dilation.w * (g.k - 1) - 1) / g.strides.w + 1;
  const Tensor xd = cast(x, DType::f64).contiguous(), wd = cast(w, DType::f64).contiguous(),
               bd = cast(b, DType::f64).contiguous();
  const double* px = xd.data<double>();
  const double* pw = wd.data<double>();
  const double* pb = bd.data<double>();
  Tensor y = zeros({g.n, g.o, oh, ow}, DType::f64);
  double* py = y.data<double>();
  const std::int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double s = pb[o];
          const std::int64_t grp = o / og;
          for (std::int64_t c = 0; c < cg; ++c)
            for (std::int64_t u = 0; u < g.k; ++u)
              for (std::int64_t v = 0; v < g.k; ++v) {
                const std::int64_t yy = i * g.strides.h - p[0] + u * g.dilation.h;
                const std::int64_t xx = j * g.strides.w - p[2] + v * g.dilation.w;
                if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
                s += px[((n * g.c + grp * cg + c) * g.h + yy) * g.w + xx] *
                     pw[((o * cg + c) * g.k + u) * g.k + v];
              }
          py[((n * g.o + o) * oh + i) * ow + j] = relu_act ? std::max(s, 0.0) : s;
        }
  return y;
}

TEST(ConvBiasAct, MatchesTheSeparateOpsAndANaiveConvolution) {
  std::uint64_t seed = 1;
  for (const Geometry& g : kGeometries)
    for (bool relu_act : {true, false})
      for (DType dt : {DType::f32, DType::f64}) {
        const Tensor x = rand_tensor({g.n, g.c, g.h, g.w}, seed++, -1, 1, dt);
        const Tensor w = rand_tensor({g.o, g.c / g.groups, g.k, g.k}, seed++, -1, 1, dt);
        const Tensor b = rand_tensor({g.o}, seed++, -1, 1, dt);
        const Tensor y = fused(x, w, b, g, relu_act);
        const std::string what = std::string(dtype_name(dt)) + (relu_act ? " relu" : " linear") +
                                 " c=" + std::to_string(g.c) + " k=" + std::to_string(g.k);
        ASSERT_EQ(y.dtype(), dt) << what;
        const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
        EXPECT_TRUE(all_close(y, separate(x, w, b, g, relu_act), tol, tol)) << what;
        EXPECT_TRUE(all_close(cast(y, DType::f64), naive(x, w, b, g, relu_act), tol, tol)) << what;
      }
}

TEST(ConvBiasAct, HalfPrecisionAndNaNsFollowTheSeparateOps) {
  const Geometry& g = kGeometries[0];
  const Tensor x = rand_tensor({g.n, g.c, g.h, g.w}, 40, -1, 1, DType::f32);
  const Tensor w = rand_tensor({g.o, g.c, g.k, g.k}, 41, -1, 1, DType::f32);
  const Tensor b = rand_tensor({g.o}, 42, -1, 1, DType::f32);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xh = cast(x, dt), wh = cast(w, dt), bh = cast(b, dt);
    EXPECT_TRUE(all_close(cast(fused(xh, wh, bh, g, true), DType::f32),
                          cast(separate(xh, wh, bh, g, true), DType::f32), 0, 0))
        << dtype_name(dt);
  }
  // A NaN pixel: the outputs it reaches are NaN before the ReLU and after it (soma's relu keeps
  // NaN, issue 19); the others are untouched.
  Tensor xn = x.clone();
  xn.data<float>()[5 * g.w + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> lin = fused(xn, w, b, g, false).to_vector<float>();
  const std::vector<float> act = fused(xn, w, b, g, true).to_vector<float>();
  std::int64_t nans = 0;
  for (std::size_t i = 0; i < lin.size(); ++i) {
    ASSERT_EQ(std::isnan(act[i]), std::isnan(lin[i])) << "at " << i;
    nans += std::isnan(lin[i]);
  }
  EXPECT_GT(nans, 0);
  EXPECT_TRUE(all_close(fused(xn, w, b, g, true), separate(xn, w, b, g, true), 1e-5, 1e-5));
}

TEST(ConvBiasAct, GradientsMatchFiniteDifferences) {
  for (bool relu_act : {true, false}) {
    const Geometry g{2, 2, 5, 5, 3, 3, 1, "same", 1, 1};
    const Tensor x = rand_tensor({2, 2, 5, 5}, 50), w = rand_tensor({3, 2, 3, 3}, 51),
                 b = rand_tensor({3}, 52);
    EXPECT_TRUE(check_gradients(
        [&](const std::vector<Tensor>& in) { return fused(in[0], in[1], in[2], g, relu_act); },
        {x, w, b}))
        << (relu_act ? "relu" : "linear");
  }
  // Strided, grouped and dilated: the gradient ops get the same attributes.
  const Geometry& g = kGeometries[2];
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return fused(in[0], in[1], in[2], g, true); },
      {rand_tensor({2, 4, 8, 8}, 53), rand_tensor({6, 2, 3, 3}, 54), rand_tensor({6}, 55)}));
}

TEST(ConvBiasAct, SecondOrderGradientsEqualTheSeparateOps) {
  const Geometry g{1, 2, 5, 5, 3, 3, 1, "same", 1, 1};
  const Tensor x = rand_tensor({1, 2, 5, 5}, 60), w = rand_tensor({3, 2, 3, 3}, 61),
               b = rand_tensor({3}, 62);
  auto second = [&](auto f) {
    GradientTape outer;
    outer.watch(w);
    Tensor gx;
    {
      GradientTape inner;
      inner.watch(x);
      gx = inner.gradient(sum(square(f(x, w, b, g, true))), x);
    }
    return outer.gradient(sum(gx * gx), w);
  };
  EXPECT_TRUE(all_close(second(fused), second(separate), 1e-10, 1e-10));
}

TEST(ConvBiasAct, Conv2DTrainsThroughItAndMatchesTheSeparateOps) {
  if (!detail::onednn_conv_built()) GTEST_SKIP() << "soma was built without oneDNN";
  nn::Conv2D conv(8, 5, {.padding = "same", .activation = nn::relu,
                         .kernel_initializer = nn::init::glorot_uniform(3)});
  const Tensor x = rand_tensor({2, 3, 10, 10}, 70, -1, 1, DType::f32);
  auto grads = [&] {
    GradientTape tape;
    const Tensor loss = sum(square(conv(x)));
    return tape.gradient(loss, std::vector<Tensor>{conv.kernel().value(), conv.bias().value()});
  };
  const std::uint64_t before = detail::onednn_conv_fused_calls();
  const std::vector<Tensor> with = grads();
  EXPECT_EQ(detail::onednn_conv_fused_calls(), before + 1) << "the layer did not run the fused op";
  std::vector<Tensor> without;
  {
    testing::FastPathsScope off(false);
    without = grads();
  }
  EXPECT_EQ(detail::onednn_conv_fused_calls(), before + 1) << "fast paths off still fused";
  EXPECT_TRUE(all_close(with[0], without[0], 1e-4, 1e-4));
  EXPECT_TRUE(all_close(with[1], without[1], 1e-4, 1e-4));
}

TEST(ConvBiasAct, UnderBf16AutocastItIsTheSeparateOpsBitForBit) {
  if (!autocast_native(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU or build";
  nn::Conv2D conv(8, 3, {.padding = "same", .activation = nn::relu,
                         .kernel_initializer = nn::init::glorot_uniform(5),
                         .bias_initializer = nn::init::glorot_uniform(6)});  // non-zero bias
  const Tensor x = rand_tensor({2, 4, 9, 9}, 90, -1, 1, DType::f32);
  auto run = [&](bool fast) {
    testing::FastPathsScope paths(fast);
    AutocastScope bf16(DType::bf16);
    GradientTape tape;
    tape.watch(x);
    const Tensor y = conv(x);
    const Tensor loss = sum(y * y);
    std::vector<Tensor> g =
        tape.gradient(loss, std::vector<Tensor>{x, conv.kernel().value(), conv.bias().value()});
    g.insert(g.begin(), y);
    return g;
  };
  const std::vector<Tensor> fused = run(true), ops = run(false);
  // The forward is the same bf16 convolution and the same f32 bias/ReLU rounding.
  EXPECT_TRUE(testing::same_bits(fused[0], ops[0]));
  // ...and it did run in bf16 (not bit-equal to the f32 layer).
  EXPECT_FALSE(testing::same_bits(fused[0], conv(x)));
  for (std::size_t i = 1; i < fused.size(); ++i)
    EXPECT_TRUE(all_close(fused[i], ops[i], 1e-5, 1e-5)) << "gradient " << i;
}

TEST(ConvBiasAct, BadBiasIsAClearError) {
  const Geometry& g = kGeometries[0];
  const Tensor x = rand_tensor({g.n, g.c, g.h, g.w}, 80, -1, 1, DType::f32);
  const Tensor w = rand_tensor({g.o, g.c, g.k, g.k}, 81, -1, 1, DType::f32);
  try {
    fused(x, w, rand_tensor({g.o + 1}, 82, -1, 1, DType::f32), g, true);
    FAIL() << "a bias of the wrong size did not throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("conv2d_bias_act"), std::string::npos) << m;
    EXPECT_NE(m.find("[9]"), std::string::npos) << m;
    EXPECT_NE(m.find("expected [8]"), std::string::npos) << m;
  }
  try {
    fused(x, w, rand_tensor({g.o}, 83), g, true);  // f64 bias with f32 operands
    FAIL() << "mixed dtypes did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_bias_act"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace soma
