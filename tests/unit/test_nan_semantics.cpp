// NaN propagation (issue 19): a NaN in the input of an activation, a clip, a maximum/minimum, a
// pooling window or a reduction gives NaN in the output, as in PyTorch and NumPy, on every CPU
// path (scalar loops, SIMD loops, the fast paths, the fused Dense/Conv2D inference kernels and
// graph-mode fused chains). Each op is tried with a NaN at the first, a middle and the last
// element of a vector longer than any SIMD width (37), and at lane boundaries, in f32 and f64.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../src/backend/cpu/onednn_conv.hpp"
#include "../../src/internal/conv_bias_act.hpp"
#include "fast_paths_testing.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::FastPathsScope;
using testing::noncontiguous;
using testing::rand_tensor;

constexpr std::int64_t kLen = 37;
const std::vector<std::int64_t> kPositions = {0, 1, 7, 8, 15, 16, 18, 31, 32, 36};
const std::vector<DType> kFloat = {DType::f32, DType::f64};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// kLen values in [-2, 2] (negatives, positives and a zero) with a NaN at `pos` (none if < 0).
Tensor with_nan(DType dt, std::int64_t pos, std::int64_t n = kLen) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = double((i * 7) % 11 - 5) * 0.37;
  if (pos >= 0) v[std::size_t(pos)] = kNaN;
  return cast(constant(v, {n}), dt);
}

// NaN exactly at the positions in `nan_at`, a number everywhere else.
::testing::AssertionResult nan_exactly_at(const Tensor& t,
                                          const std::vector<std::int64_t>& nan_at) {
  const std::vector<double> v = t.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    bool want = false;
    for (auto p : nan_at) want |= std::int64_t(i) == p;
    if (std::isnan(v[i]) != want)
      return ::testing::AssertionFailure()
             << "element " << i << " is " << v[i] << ", expected " << (want ? "NaN" : "a number");
  }
  return ::testing::AssertionSuccess();
}

std::string where_(DType dt, std::int64_t pos) {
  return std::string(dtype_name(dt)) + ", NaN at " + std::to_string(pos);
}

// ---- activations -----------------------------------------------------------------------------

TEST(NanActivations, ReluPropagatesNaN) {
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      EXPECT_TRUE(nan_exactly_at(relu(with_nan(dt, pos)), {pos})) << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(relu(noncontiguous(with_nan(dt, pos))), {pos})) << where_(dt, pos);
    }
}

TEST(NanActivations, ReluOfHalfPrecisionPropagatesNaN) {
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_TRUE(nan_exactly_at(relu(with_nan(dt, 18)), {18})) << dtype_name(dt);
}

TEST(NanActivations, ReluKeepsItsValuesElsewhere) {
  const Tensor y = relu(constant<double>({-1.0, 0.0, -0.0, 2.5, kNaN,
                                          -std::numeric_limits<double>::infinity()}));
  const std::vector<double> v = y.to_vector<double>();
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], 0.0);
  EXPECT_FALSE(std::signbit(v[2]));  // relu(-0) = +0
  EXPECT_EQ(v[3], 2.5);
  EXPECT_TRUE(std::isnan(v[4]));
  EXPECT_EQ(v[5], 0.0);
}

TEST(NanActivations, LeakyReluEluSoftplusSigmoidTanhGeluPropagateNaN) {
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      const Tensor x = with_nan(dt, pos);
      EXPECT_TRUE(nan_exactly_at(leaky_relu(x, 0.1), {pos})) << "leaky_relu " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(elu(x, 1.0), {pos})) << "elu " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(softplus(x), {pos})) << "softplus " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(sigmoid(x), {pos})) << "sigmoid " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(tanh(x), {pos})) << "tanh " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(gelu(x), {pos})) << "gelu " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(gelu(x, true), {pos})) << "gelu tanh " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(abs(x), {pos})) << "abs " << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(sign(x), {pos})) << "sign " << where_(dt, pos);
    }
}

TEST(NanActivations, LayerActivationsByNamePropagateNaN) {
  for (const char* name :
       {"relu", "elu", "leaky_relu", "gelu", "softplus", "sigmoid", "tanh", "swish"}) {
    const nn::Activation act(name);
    EXPECT_TRUE(nan_exactly_at(act(with_nan(DType::f32, 18)), {18})) << name;
  }
}

// PyTorch's relu backward is threshold_backward(g, y, 0) = (y <= 0 ? 0 : g): where x is NaN,
// y is NaN and g passes through. leaky_relu's is (x > 0 ? g : alpha g), elu's (x <= 0 ? ... : g).
TEST(NanActivations, GradientsAtNaNFollowPyTorch) {
  const Tensor x = with_nan(DType::f64, 18);
  auto grad_of = [&](auto f) {
    GradientTape tape;
    tape.watch(x);
    return tape.gradient(sum(f(x) * 3.0), x).template to_vector<double>();
  };
  const std::vector<double> gr = grad_of([](const Tensor& t) { return relu(t); });
  EXPECT_EQ(gr[18], 3.0);
  EXPECT_EQ(gr[0], 0.0);  // x = -1.85
  EXPECT_EQ(gr[1], 3.0);  // x = 0.74
  EXPECT_NEAR(grad_of([](const Tensor& t) { return leaky_relu(t, 0.1); })[18], 0.3, 1e-12);
  EXPECT_EQ(grad_of([](const Tensor& t) { return elu(t, 1.0); })[18], 3.0);
}

// ---- clip, maximum, minimum --------------------------------------------------------------------

TEST(NanBinary, ClipPropagatesNaN) {
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      EXPECT_TRUE(nan_exactly_at(clip(with_nan(dt, pos), -0.5, 0.5), {pos})) << where_(dt, pos);
      EXPECT_TRUE(nan_exactly_at(clip(noncontiguous(with_nan(dt, pos)), 0.0, 6.0), {pos}))
          << where_(dt, pos);
    }
}

TEST(NanBinary, MaximumAndMinimumAreNaNIfEitherOperandIs) {
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      const Tensor a = with_nan(dt, pos), b = cast(rand_tensor({kLen}, 3, -2, 2), dt);
      for (const Tensor& r : {maximum(a, b), maximum(b, a), minimum(a, b), minimum(b, a)})
        EXPECT_TRUE(nan_exactly_at(r, {pos})) << where_(dt, pos);
      // Against a scalar (the broadcast paths), either side.
      const Tensor zero = scalar(0.0, dt);
      for (const Tensor& r :
           {maximum(a, zero), maximum(zero, a), minimum(a, zero), minimum(zero, a)})
        EXPECT_TRUE(nan_exactly_at(r, {pos})) << where_(dt, pos);
      // A NaN scalar makes every element NaN.
      const Tensor nan = scalar(kNaN, dt);
      std::vector<std::int64_t> all(kLen);
      for (std::int64_t i = 0; i < kLen; ++i) all[std::size_t(i)] = i;
      EXPECT_TRUE(nan_exactly_at(maximum(b, nan), all)) << dtype_name(dt);
      EXPECT_TRUE(nan_exactly_at(minimum(nan, b), all)) << dtype_name(dt);
    }
}

TEST(NanBinary, MaximumOfBroadcastRowsPropagatesNaN) {
  // [5, 37] against [1, 37] and [5, 1]: the row loops of the strided path.
  for (DType dt : kFloat) {
    const Tensor m = cast(rand_tensor({5, kLen}, 4, -2, 2), dt);
    const Tensor row = reshape(with_nan(dt, 36), {1, kLen});
    const std::vector<double> v = maximum(m, row).to_vector<double>();
    for (std::int64_t r = 0; r < 5; ++r) EXPECT_TRUE(std::isnan(v[std::size_t(r * kLen + 36)]));
    const Tensor colc = cast(constant<double>({0.1, kNaN, 0.2, 0.3, 0.4}, {5, 1}), dt);
    const std::vector<double> w = minimum(m, colc).to_vector<double>();
    for (std::int64_t j = 0; j < kLen; ++j) {
      EXPECT_TRUE(std::isnan(w[std::size_t(kLen + j)]));
      EXPECT_FALSE(std::isnan(w[std::size_t(j)]));
    }
  }
}

// ---- reductions --------------------------------------------------------------------------------

TEST(NanReductions, EveryReductionOfAVectorWithNaNIsNaN) {
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      const Tensor x = with_nan(dt, pos);
      for (const Tensor& r : {sum(x), mean(x), prod(x), max(x), min(x)})
        EXPECT_TRUE(std::isnan(r.item<double>())) << where_(dt, pos);
      EXPECT_EQ(argmax(x, 0).item<std::int64_t>(), pos) << where_(dt, pos);
      EXPECT_EQ(argmin(x, 0).item<std::int64_t>(), pos) << where_(dt, pos);
    }
}

TEST(NanReductions, ArgmaxAndArgminGiveTheFirstNaN) {
  for (DType dt : kFloat) {
    Tensor x = cast(with_nan(DType::f64, 9), DType::f64);
    x.data<double>()[30] = kNaN;
    x = cast(x, dt);
    EXPECT_EQ(argmax(x, 0).item<std::int64_t>(), 9);
    EXPECT_EQ(argmin(x, 0).item<std::int64_t>(), 9);
    EXPECT_EQ(argmax(noncontiguous(x), 0).item<std::int64_t>(), 9);
  }
}

TEST(NanReductions, LongVectorsThroughTheSplitPathAreNaN) {
  // Past the fixed block of the split reduction (32768) and the 8-lane rows.
  for (DType dt : kFloat)
    for (std::int64_t pos : {std::int64_t(0), std::int64_t(33000), std::int64_t(39999)}) {
      const Tensor x = with_nan(dt, pos, 40000);
      for (const Tensor& r : {sum(x), mean(x), max(x), min(x)})
        EXPECT_TRUE(std::isnan(r.item<double>())) << where_(dt, pos);
      EXPECT_EQ(argmax(x, 0).item<std::int64_t>(), pos);
      EXPECT_EQ(argmin(x, 0).item<std::int64_t>(), pos);
    }
}

TEST(NanReductions, ReductionsAlongEachAxisOfAMatrixPropagateNaN) {
  // [5, 37] with a NaN at (2, pos): along axis 1 only row 2 is NaN, along axis 0 only column
  // pos. The contiguous matrix takes the inner (axis 1) and outer (axis 0) loops; its transpose
  // the other way round.
  for (DType dt : kFloat)
    for (auto pos : kPositions) {
      Tensor m64 = rand_tensor({5, kLen}, 6, -2, 2);
      m64.data<double>()[2 * kLen + pos] = kNaN;
      const Tensor m = cast(m64, dt);
      for (bool transposed : {false, true}) {
        const Tensor x = transposed ? transpose(m) : m;
        const std::int64_t row_axis = transposed ? 0 : 1, col_axis = 1 - row_axis;
        for (const Tensor& r : {sum(x, {row_axis}), mean(x, {row_axis}), prod(x, {row_axis}),
                                max(x, {row_axis}), min(x, {row_axis})})
          EXPECT_TRUE(nan_exactly_at(r, {2})) << where_(dt, pos) << (transposed ? " (T)" : "");
        for (const Tensor& r : {sum(x, {col_axis}), mean(x, {col_axis}), prod(x, {col_axis}),
                                max(x, {col_axis}), min(x, {col_axis})})
          EXPECT_TRUE(nan_exactly_at(r, {pos})) << where_(dt, pos) << (transposed ? " (T)" : "");
        EXPECT_EQ(argmax(x, row_axis).to_vector<std::int64_t>()[2], pos) << where_(dt, pos);
        EXPECT_EQ(argmin(x, row_axis).to_vector<std::int64_t>()[2], pos) << where_(dt, pos);
        EXPECT_EQ(argmax(x, col_axis).to_vector<std::int64_t>()[std::size_t(pos)], 2)
            << where_(dt, pos);
        EXPECT_EQ(argmin(x, col_axis).to_vector<std::int64_t>()[std::size_t(pos)], 2)
            << where_(dt, pos);
      }
    }
}

TEST(NanReductions, HalfPrecisionMaxAndArgmaxPropagateNaN) {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = with_nan(dt, 36);
    EXPECT_TRUE(std::isnan(max(x).item<double>())) << dtype_name(dt);
    EXPECT_TRUE(std::isnan(min(x).item<double>())) << dtype_name(dt);
    EXPECT_EQ(argmax(x, 0).item<std::int64_t>(), 36) << dtype_name(dt);
  }
}

TEST(NanReductions, SoftmaxOfARowWithNaNIsNaN) {
  for (DType dt : kFloat) {
    Tensor m64 = rand_tensor({3, kLen}, 7, -2, 2);
    m64.data<double>()[kLen + 20] = kNaN;
    const Tensor m = cast(m64, dt);
    std::vector<std::int64_t> row1;
    for (std::int64_t j = 0; j < kLen; ++j) row1.push_back(kLen + j);
    EXPECT_TRUE(nan_exactly_at(softmax(m, 1), row1)) << dtype_name(dt);
    EXPECT_TRUE(nan_exactly_at(log_softmax(m, 1), row1)) << dtype_name(dt);
  }
}

// ---- pooling -----------------------------------------------------------------------------------

TEST(NanPooling, MaxPoolWindowsHoldingANaNAreNaN) {
  // [1, 2, 6, 36]: 2x2 windows (the fast path, AVX-512 for f32 where built) and 3x3 stride-1
  // windows (the generic loop), a NaN in every corner position of a 2x2 window.
  for (DType dt : kFloat)
    for (bool fast : {true, false})
      for (std::int64_t corner = 0; corner < 4; ++corner) {
        FastPathsScope scope(fast);
        Tensor x64 = rand_tensor({1, 2, 6, 36}, 8, -2, 2);
        const std::int64_t y = 2 + corner / 2, xcol = 34 + corner % 2;  // window (1, 17)
        x64.data<double>()[36 * 6 + y * 36 + xcol] = kNaN;               // channel 1
        const Tensor x = cast(x64, dt);
        const Tensor p = max_pool2d(x, 2);
        EXPECT_TRUE(nan_exactly_at(p, {3 * 18 + 1 * 18 + 17}))
            << where_(dt, corner) << (fast ? " fast" : " generic");
        const std::vector<double> q = max_pool2d(x, 3, Size2{1, 1}).to_vector<double>();
        std::int64_t nans = 0;
        for (double v : q) nans += std::isnan(v);
        EXPECT_EQ(nans, 3 * (xcol == 34 ? 2 : 1)) << where_(dt, corner);  // windows holding it
        EXPECT_TRUE(std::isnan(sum(avg_pool2d(x, 2)).item<double>()));
      }
}

// ---- fused inference kernels -------------------------------------------------------------------

TEST(NanFused, DenseWithReluPropagatesNaNOnTheFastPathAndTheGenericOps) {
  nn::Dense d(20, nn::relu, {.bias_initializer = nn::init::random_uniform(-0.5, 0.5, 12)});
  Tensor x = cast(rand_tensor({1, 30}, 9), DType::f32);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  NoGradScope no_grad;
  for (bool fast : {true, false}) {
    FastPathsScope scope(fast);
    const std::vector<float> y = d(x).to_vector<float>();
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << (fast ? "fast" : "generic");
  }
}

TEST(NanFused, ConvBiasReluPropagatesNaNFromTheInputWeightsAndBias) {
  const Tensor x = rand_tensor({1, 16, 8, 8}, 10, -1, 1, DType::f32);
  const Tensor w = rand_tensor({32, 16, 3, 3}, 11, -1, 1, DType::f32);
  const Tensor b = rand_tensor({32}, 12, -1, 1, DType::f32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  NoGradScope no_grad;
  for (int which = 0; which < 3; ++which) {
    Tensor xn = x.clone(), wn = w.clone(), bn = b.clone();
    if (which == 0) xn.data<float>()[3 * 64 + 4 * 8 + 4] = nan;  // pixel (4, 4) of channel 3
    if (which == 1) wn.data<float>()[5 * 144] = nan;             // filter 5
    if (which == 2) bn.data<float>()[9] = nan;                   // bias 9
    for (const char* padding : {"same"}) {
      const Tensor lin = detail::conv2d_bias_act(xn, wn, bn, 1, padding, 1, 1, false);
      const Tensor act = detail::conv2d_bias_act(xn, wn, bn, 1, padding, 1, 1, true);
      const std::vector<float> l = lin.to_vector<float>(), a = act.to_vector<float>();
      std::int64_t nans = 0;
      for (std::size_t i = 0; i < l.size(); ++i) {
        nans += std::isnan(l[i]);
        EXPECT_EQ(std::isnan(a[i]), std::isnan(l[i])) << "case " << which << " at " << i;
      }
      EXPECT_GT(nans, 0) << which;
      // The separate ops agree.
      const Tensor sep = relu(conv2d(xn, wn, 1, padding) + reshape(bn, {1, 32, 1, 1}));
      const std::vector<float> s = sep.to_vector<float>();
      for (std::size_t i = 0; i < s.size(); ++i)
        EXPECT_EQ(std::isnan(a[i]), std::isnan(s[i])) << "case " << which << " at " << i;
    }
  }
}

TEST(NanFused, Conv2DLayerWithReluPropagatesNaNInInference) {
  nn::Conv2D conv(32, 3, {.padding = "same", .activation = nn::relu});
  Tensor x = rand_tensor({1, 16, 8, 8}, 13, -1, 1, DType::f32);
  x.data<float>()[100] = std::numeric_limits<float>::quiet_NaN();
  NoGradScope no_grad;
  const Tensor y = conv(x);
  EXPECT_TRUE(std::isnan(sum(y).item<double>()));
}

// The fused primitive's ReLU post-op is used only while the weights are finite; that check is
// cached with the weights' identity, so a NaN assigned into the kernel is seen on the next call.
TEST(NanFused, Conv2DLayerSeesANaNAssignedIntoItsWeights) {
  nn::Conv2D conv(32, 3, {.padding = "same", .activation = nn::relu});
  const Tensor x = rand_tensor({1, 16, 8, 8}, 15, -1, 1, DType::f32);
  NoGradScope no_grad;
  const std::uint64_t calls = detail::onednn_conv_fused_calls();
  EXPECT_FALSE(std::isnan(sum(conv(x)).item<double>()));
  Variable kernel = conv.kernel();  // a handle on the layer's kernel
  Tensor k = kernel.value().clone();
  k.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  kernel.assign(k);
  EXPECT_TRUE(std::isnan(sum(conv(x)).item<double>()));
  kernel.assign(zeros_like(k));  // finite again: the post-op path, all zeros
  EXPECT_EQ(sum(conv(x)).item<double>(), 0.0);
  if (detail::onednn_conv_built())
    EXPECT_EQ(detail::onednn_conv_fused_calls(), calls + 3) << "the fused path did not run";
}

TEST(NanFused, GraphModeFusedReluChainPropagatesNaN) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor a = relu(negative(x) * 2.0 + 1.0);
  Tensor b = relu(x);
  Session fused(g), plain(g, {.optimize = false});
  for (std::int64_t n : {std::int64_t(kLen), std::int64_t(2048 * 3 + 17)}) {
    for (std::int64_t pos : {std::int64_t(0), n / 2, n - 1}) {
      Tensor xv = cast(rand_tensor({n}, 14, -2, 2), DType::f32);
      xv.data<float>()[pos] = std::numeric_limits<float>::quiet_NaN();
      for (Session* s : {&fused, &plain}) {
        auto r = s->run({a, b}, {{x, xv}});
        EXPECT_TRUE(nan_exactly_at(r[0], {pos})) << n << " " << pos;
        EXPECT_TRUE(nan_exactly_at(r[1], {pos})) << n << " " << pos;
      }
    }
  }
  EXPECT_GT(fused.stats().fused_nodes, 0);
}

}  // namespace
}  // namespace soma
