// Winograd F(2x2, 5x5) convolution of Conv2D's inference path (src/backend/cpu/conv_winograd.cpp):
// against an f64 direct convolution on many shapes and paddings, against the direct oneDNN path
// (Winograd switched off), the path actually taken, the filter transform recomputed when the
// weights change, non-finite operands left to the direct path, the cache bounded.
//
// Tolerance: Winograd mixes the 36 values of an input tile with coefficients up to 5/2 and the
// filter with thirds and fifteenths, so its rounding error scales with the output's overall
// magnitude, not with each output's own value. A simulation of the f32 pipeline (C = 32,
// scripts/winograd-points.py) gave a largest error per tile of 1.1e-5 times the output's RMS;
// over the cases here the largest seen is 5.7e-6 (printed by the test; the direct oneDNN path's
// is 5.8e-6). Checked: |y - ref| <= kTol * rms(ref) with kTol = 5e-5, 8x the largest error seen
// and still 400x below a wrong coefficient (one 1/15 in G replaced by 1/16 gives 2e-2 to 4e-2).
// Non-finite inputs or weights go to the direct path; a non-finite bias is Winograd's (added
// per channel after the transform).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../src/backend/cpu/conv_winograd.hpp"
#include "../../src/backend/cpu/onednn_conv.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using detail::ConvGeometry;
using testing::rand_tensor;

constexpr double kTol = 5e-5;

struct Case {
  std::int64_t n, c, h, w, o;
  std::int64_t pt, pb, pl, pr;
  bool bias, relu;
};

std::string name(const Case& k) {
  return "x[" + std::to_string(k.n) + "," + std::to_string(k.c) + "," + std::to_string(k.h) +
         "," + std::to_string(k.w) + "] o" + std::to_string(k.o) + " pad " +
         std::to_string(k.pt) + "," + std::to_string(k.pb) + "," + std::to_string(k.pl) + "," +
         std::to_string(k.pr) + (k.bias ? " bias" : "") + (k.relu ? " relu" : "");
}

ConvGeometry geometry(const Case& k) {
  return {k.n, k.c, k.h, k.w, k.o, 5, 5, k.h + k.pt + k.pb - 4, k.w + k.pl + k.pr - 4,
          1,   1,   k.pt, k.pb, k.pl, k.pr, 1, 1, 1};
}

// act(conv(x, w) + b) in f64.
std::vector<double> reference(const ConvGeometry& g, const std::vector<float>& x,
                              const std::vector<float>& w, const float* b, bool relu) {
  std::vector<double> y(std::size_t(g.n * g.o * g.oh * g.ow));
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t i = 0; i < g.oh; ++i)
        for (std::int64_t j = 0; j < g.ow; ++j) {
          double acc = b ? double(b[o]) : 0.0;
          for (std::int64_t c = 0; c < g.c; ++c)
            for (std::int64_t u = 0; u < 5; ++u)
              for (std::int64_t v = 0; v < 5; ++v) {
                const std::int64_t yy = i - g.pt + u, xx = j - g.pl + v;
                if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
                acc += double(x[std::size_t(((n * g.c + c) * g.h + yy) * g.w + xx)]) *
                       double(w[std::size_t(((o * g.c + c) * 5 + u) * 5 + v)]);
              }
          y[std::size_t(((n * g.o + o) * g.oh + i) * g.ow + j)] =
              relu ? std::max(acc, 0.0) : acc;
        }
  return y;
}

std::vector<float> random_floats(std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  const std::vector<double> v = rand_tensor({n}, seed, -scale, scale).to_vector<double>();
  return std::vector<float>(v.begin(), v.end());
}

// max |y - ref| / rms(ref)
double scaled_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double ss = 0, worst = 0;
  for (double r : ref) ss += r * r;
  const double rms = std::sqrt(ss / double(ref.size()));
  for (std::size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::abs(double(y[i]) - ref[i]));
  return worst / rms;
}

// Winograd on wherever it can compute the geometry (`always`: also the small channel counts
// where it does not pay), whatever SOMA_CONV_WINOGRAD and SOMA_CONV_IMPL say, for the test.
class WinogradTest : public ::testing::Test {
 protected:
  detail::WinogradUse before_ = detail::conv_winograd_use();
  detail::ConvImpl impl_before_ = detail::conv_impl();
  void SetUp() override {
    if (!detail::onednn_conv_built()) GTEST_SKIP() << "soma was built without oneDNN";
    detail::set_conv_winograd(detail::WinogradUse::always);
    detail::set_conv_impl(detail::ConvImpl::automatic);
  }
  void TearDown() override {
    detail::set_conv_winograd(before_);
    detail::set_conv_impl(impl_before_);
  }
};

// The fused path's result with Winograd on or off.
std::vector<float> fused(const ConvGeometry& g, const std::vector<float>& x, const Tensor& w,
                         const float* b, bool relu, bool winograd) {
  detail::set_conv_winograd(winograd ? detail::WinogradUse::always : detail::WinogradUse::off);
  std::vector<float> y(std::size_t(g.n * g.o * g.oh * g.ow), -7.0f);
  EXPECT_TRUE(detail::onednn_conv_forward_fused(g, x.data(), w.data<float>(), w.storage(), b,
                                                relu, y.data()));
  detail::set_conv_winograd(detail::WinogradUse::always);
  return y;
}

Tensor weight_tensor(const std::vector<float>& v, std::int64_t o, std::int64_t c) {
  Tensor t = Tensor::empty({o, c, 5, 5}, DType::f32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

TEST_F(WinogradTest, MatchesAnF64ConvolutionAndTheDirectPath) {
  const std::vector<Case> cases = {
      {1, 32, 14, 14, 64, 2, 2, 2, 2, true, true},    // LeNet's second convolution
      {1, 32, 14, 14, 64, 2, 2, 2, 2, false, false},
      {2, 8, 9, 11, 8, 2, 2, 2, 2, true, false},      // odd sizes: partial tiles
      {3, 33, 8, 10, 64, 0, 0, 0, 0, false, true},    // valid; C not a multiple of 16
      {1, 8, 12, 7, 64, 1, 3, 0, 2, true, true},      // asymmetric pads
      {2, 32, 6, 6, 8, 3, 1, 2, 1, false, false},
      {1, 33, 5, 5, 8, 2, 2, 2, 2, true, false},
      {3, 8, 17, 16, 8, 0, 1, 1, 0, true, true},
      {1, 16, 40, 40, 24, 2, 2, 2, 2, true, true},    // several chunks of tiles
  };
  double worst = 0, worst_direct = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(name(k));
    const ConvGeometry g = geometry(k);
    ASSERT_TRUE(detail::conv_winograd_applies(g));
    const std::vector<float> x = random_floats(k.n * k.c * k.h * k.w, 1);
    // Glorot-like scale: outputs of order 1.
    const std::vector<float> wv =
        random_floats(k.o * k.c * 25, 2, std::sqrt(3.0 / double(k.c * 25)));
    const std::vector<float> b = random_floats(k.o, 3, 0.5);
    const Tensor w = weight_tensor(wv, k.o, k.c);
    const float* bp = k.bias ? b.data() : nullptr;
    const std::vector<double> ref = reference(g, x, wv, bp, k.relu);
    const std::uint64_t calls = detail::conv_winograd_calls();
    const std::vector<float> y = fused(g, x, w, bp, k.relu, true);
    EXPECT_EQ(detail::conv_winograd_calls(), calls + 1) << "Winograd did not run";
    const double err = scaled_error(y, ref);
    EXPECT_LE(err, kTol);
    worst = std::max(worst, err);
    const std::vector<float> direct = fused(g, x, w, bp, k.relu, false);
    EXPECT_EQ(detail::conv_winograd_calls(), calls + 1) << "Winograd ran while switched off";
    EXPECT_LE(scaled_error(direct, ref), 1e-5);
    worst_direct = std::max(worst_direct, scaled_error(direct, ref));
    std::vector<double> dref(direct.begin(), direct.end());
    EXPECT_LE(scaled_error(y, dref), kTol);
    if (k.relu)
      for (float v : y) ASSERT_GE(v, 0.0f);
  }
  std::printf("largest error / rms(output): Winograd %.3g, direct %.3g\n", worst, worst_direct);
}

TEST_F(WinogradTest, ChunksOnTwoThreadsMatch) {
  // 288 tiles, 44M multiply-adds for a direct convolution: past two GEMM grains, so the chunks of
  // tiles are spread over two threads, each running the shared GEMM primitive.
  const int threads_before = get_num_threads();
  set_num_threads(2);
  const Case k{2, 32, 24, 24, 48, 2, 2, 2, 2, true, true};
  const ConvGeometry g = geometry(k);
  const std::vector<float> x = random_floats(k.n * k.c * k.h * k.w, 40);
  const std::vector<float> wv = random_floats(k.o * k.c * 25, 41, std::sqrt(3.0 / (32 * 25)));
  const std::vector<float> b = random_floats(k.o, 42, 0.5);
  const Tensor w = weight_tensor(wv, k.o, k.c);
  const std::vector<float> y = fused(g, x, w, b.data(), true, true);
  set_num_threads(threads_before);
  EXPECT_LE(scaled_error(y, reference(g, x, wv, b.data(), true)), kTol);
}

TEST_F(WinogradTest, DeclinesGeometriesItDoesNotServe) {
  const ConvGeometry lenet{1, 32, 14, 14, 64, 5, 5, 14, 14, 1, 1, 2, 2, 2, 2, 1, 1, 1};
  EXPECT_TRUE(detail::conv_winograd_supports(lenet));
  EXPECT_TRUE(detail::conv_winograd_pays(lenet));
  ConvGeometry g = lenet;
  g.kh = g.kw = 3, g.oh = g.ow = 16;
  EXPECT_FALSE(detail::conv_winograd_supports(g));
  g = lenet, g.sh = g.sw = 2, g.oh = g.ow = 7;
  EXPECT_FALSE(detail::conv_winograd_supports(g));
  g = lenet, g.dh = g.dw = 2;
  EXPECT_FALSE(detail::conv_winograd_supports(g));
  g = lenet, g.groups = 2;
  EXPECT_FALSE(detail::conv_winograd_supports(g));
  // Where it does not pay (measured): taken only under `always`.
  g = lenet, g.c = 1;  // LeNet's first convolution
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  g = lenet, g.c = 8;
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  g = lenet, g.o = 16;
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  g = lenet, g.o = 24;
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  // Small work pays on one thread only (the direct kernel gains more from a second one).
  const int threads_before = get_num_threads();
  g = lenet, g.c = 16, g.o = 32;
  set_num_threads(1);
  EXPECT_TRUE(detail::conv_winograd_pays(g));
  EXPECT_TRUE(detail::conv_winograd_pays(lenet));
  set_num_threads(2);
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  EXPECT_TRUE(detail::conv_winograd_pays(lenet));
  set_num_threads(threads_before);
  g = lenet, g.h = g.w = g.oh = g.ow = 4;
  EXPECT_FALSE(detail::conv_winograd_pays(g));
  EXPECT_TRUE(detail::conv_winograd_applies(g));
  detail::set_conv_winograd(detail::WinogradUse::automatic);
  EXPECT_FALSE(detail::conv_winograd_applies(g));
  EXPECT_TRUE(detail::conv_winograd_applies(lenet));
  detail::set_conv_winograd(detail::WinogradUse::off);
  EXPECT_FALSE(detail::conv_winograd_applies(lenet));
  detail::set_conv_winograd(detail::WinogradUse::always);
  // C = 1 through the fused path: the direct kernel runs, right.
  const Case k{1, 1, 12, 12, 8, 2, 2, 2, 2, true, true};
  const ConvGeometry g1 = geometry(k);
  const std::vector<float> x = random_floats(144, 4), wv = random_floats(200, 5, 0.3),
                           b = random_floats(8, 6);
  const Tensor w1 = weight_tensor(wv, 8, 1);
  const std::uint64_t calls = detail::conv_winograd_calls();
  detail::set_conv_winograd(detail::WinogradUse::automatic);
  std::vector<float> y(8 * 144);
  ASSERT_TRUE(detail::onednn_conv_forward_fused(g1, x.data(), w1.data<float>(), w1.storage(),
                                                b.data(), true, y.data()));
  detail::set_conv_winograd(detail::WinogradUse::always);
  EXPECT_EQ(detail::conv_winograd_calls(), calls);
  EXPECT_LE(scaled_error(y, reference(g1, x, wv, b.data(), true)), 1e-5);
  // Under `always` Winograd computes it (one input channel), right.
  y = fused(g1, x, w1, b.data(), true, true);
  EXPECT_EQ(detail::conv_winograd_calls(), calls + 1);
  EXPECT_LE(scaled_error(y, reference(g1, x, wv, b.data(), true)), kTol);
}

TEST_F(WinogradTest, Conv2DLayerInferenceTakesIt) {
  detail::set_conv_winograd(detail::WinogradUse::automatic);  // as a program runs it
  nn::Conv2D conv(64, 5, {.padding = "same", .activation = nn::relu,
                          .kernel_initializer = nn::init::glorot_uniform(7),
                          .bias_initializer = nn::init::random_uniform(-0.5, 0.5, 8)});
  const Tensor x = cast(rand_tensor({1, 32, 14, 14}, 9), DType::f32);
  NoGradScope no_grad;
  conv(x);
  const std::uint64_t calls = detail::conv_winograd_calls();
  const std::uint64_t fused_calls = detail::onednn_conv_fused_calls();
  const Tensor y = conv(x);
  EXPECT_EQ(detail::conv_winograd_calls(), calls + 1);
  EXPECT_EQ(detail::onednn_conv_fused_calls(), fused_calls + 1);
  detail::set_conv_winograd(detail::WinogradUse::off);
  const Tensor y_direct = conv(x);
  detail::set_conv_winograd(detail::WinogradUse::automatic);
  EXPECT_EQ(detail::conv_winograd_calls(), calls + 1);
  const std::vector<float> a = y.to_vector<float>();
  const std::vector<double> d = y_direct.to_vector<double>();
  EXPECT_LE(scaled_error(a, d), kTol);
}

TEST_F(WinogradTest, WeightsChangedInPlaceGetANewFilterTransform) {
  const Case k{1, 16, 10, 10, 16, 2, 2, 2, 2, true, false};
  const ConvGeometry g = geometry(k);
  const std::vector<float> x = random_floats(16 * 100, 10), b = random_floats(16, 11);
  std::vector<float> wv = random_floats(16 * 16 * 25, 12, 0.1);
  Tensor w = weight_tensor(wv, 16, 16);
  std::vector<float> y = fused(g, x, w, b.data(), false, true);
  EXPECT_LE(scaled_error(y, reference(g, x, wv, b.data(), false)), kTol);
  // Same weights again: the cached transform.
  const std::uint64_t transforms = detail::conv_winograd_filter_transforms();
  y = fused(g, x, w, b.data(), false, true);
  EXPECT_EQ(detail::conv_winograd_filter_transforms(), transforms);
  // Written in place (as an optimiser step does: the version counter moves).
  wv = random_floats(16 * 16 * 25, 13, 0.1);
  std::copy(wv.begin(), wv.end(), w.data<float>());
  w.storage()->version.fetch_add(1);
  y = fused(g, x, w, b.data(), false, true);
  EXPECT_EQ(detail::conv_winograd_filter_transforms(), transforms + 1);
  EXPECT_LE(scaled_error(y, reference(g, x, wv, b.data(), false)), kTol);
  // New contents at the same address under another storage (a freed and reallocated kernel).
  const Tensor other = Tensor::empty({16, 16, 5, 5}, DType::f32);
  wv = random_floats(16 * 16 * 25, 14, 0.1);
  std::copy(wv.begin(), wv.end(), w.data<float>());
  std::vector<float> y2(y.size());
  ASSERT_TRUE(detail::onednn_conv_forward_fused(g, x.data(), w.data<float>(), other.storage(),
                                                b.data(), false, y2.data()));
  EXPECT_LE(scaled_error(y2, reference(g, x, wv, b.data(), false)), kTol);
}

TEST_F(WinogradTest, NonFiniteOperandsGiveTheDirectPathsResult) {
  const Case k{1, 16, 10, 10, 16, 2, 2, 2, 2, true, true};
  const ConvGeometry g = geometry(k);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int variant = 0; variant < 6; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::vector<float> x = random_floats(16 * 100, 20), b = random_floats(16, 21);
    std::vector<float> wv = random_floats(16 * 16 * 25, 22, 0.1);
    if (variant == 0) x[3 * 100 + 4 * 10 + 5] = inf;
    if (variant == 1) x[7 * 100 + 2 * 10 + 2] = -inf;
    if (variant == 2) x[0] = nan;
    if (variant == 3) wv[5 * 400 + 3 * 25 + 12] = inf;
    // A non-finite bias is added after the transform, per channel: Winograd takes it.
    if (variant == 4) b[3] = inf;
    if (variant == 5) b[6] = nan;
    const bool taken = variant >= 4;
    const Tensor w = weight_tensor(wv, 16, 16);
    const std::uint64_t calls = detail::conv_winograd_calls();
    const std::vector<float> y = fused(g, x, w, b.data(), true, true);
    EXPECT_EQ(detail::conv_winograd_calls(), calls + (taken ? 1 : 0));
    const std::vector<float> d = fused(g, x, w, b.data(), true, false);
    std::size_t nonfinite = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      nonfinite += !std::isfinite(y[i]);
      if (std::isnan(d[i])) {
        ASSERT_TRUE(std::isnan(y[i])) << i;
      } else if (!taken || !std::isfinite(d[i])) {
        ASSERT_EQ(y[i], d[i]) << i;
      } else {
        ASSERT_NEAR(y[i], d[i], 1e-4) << i;
      }
    }
    EXPECT_GT(nonfinite, 0u) << "the test did not exercise a non-finite output";
  }
}

// Finite but huge operands: Winograd's transforms scale a tile's values up (by ~10^4 at most over
// a direct sum), so where the direct sums stay finite its intermediates could overflow to inf
// and come out as NaN. Such operands go to the direct kernel: the same result, bit for bit;
// large but safe ones still take Winograd.
TEST_F(WinogradTest, HugeFiniteOperandsGiveTheDirectPathsResult) {
  const Case k{1, 16, 10, 10, 16, 2, 2, 2, 2, true, false};
  const ConvGeometry g = geometry(k);
  for (const double scale : {1e36, 1e20}) {
    SCOPED_TRACE("input scale " + std::to_string(scale));
    const std::vector<float> x = random_floats(16 * 100, 23, scale), b = random_floats(16, 24);
    const Tensor w = weight_tensor(random_floats(16 * 16 * 25, 25, 0.1), 16, 16);
    const std::uint64_t calls = detail::conv_winograd_calls();
    const std::vector<float> y = fused(g, x, w, b.data(), false, true);
    const bool taken = detail::conv_winograd_calls() == calls + 1;
    const std::vector<float> d = fused(g, x, w, b.data(), false, false);
    for (std::size_t i = 0; i < d.size(); ++i) ASSERT_TRUE(std::isfinite(d[i])) << i;
    if (scale > 1e30) {
      EXPECT_FALSE(taken);
      for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], d[i]) << i;
    } else {
      EXPECT_TRUE(taken);
      double worst = 0, ss = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        worst = std::max(worst, std::abs(double(y[i]) - double(d[i])));
        ss += double(d[i]) * double(d[i]);
      }
      EXPECT_LT(worst / std::sqrt(ss / double(d.size())), 5e-5);
    }
  }
}

TEST_F(WinogradTest, TheCacheStaysBounded) {
  const std::vector<float> wv = random_floats(8 * 8 * 25, 30, 0.1);
  const Tensor w = weight_tensor(wv, 8, 8);
  for (std::int64_t h = 5; h < 60; ++h) {
    const Case k{1, 8, h, 5, 8, 2, 2, 2, 2, false, false};
    const ConvGeometry g = geometry(k);
    const std::vector<float> x = random_floats(8 * h * 5, 31);
    const std::vector<float> y = fused(g, x, w, nullptr, false, true);
    if (h == 5 || h == 59)
      EXPECT_LE(scaled_error(y, reference(g, x, wv, nullptr, false)), kTol) << h;
  }
  EXPECT_LE(detail::conv_winograd_cache_size(), 32u);
  EXPECT_GT(detail::conv_winograd_cache_size(), 0u);
}

// dx of the convolution g from dy in f64: dx[c][iy][ix] = sum dy[o][iy + pt - u][ix + pl - v]
// w[o][c][u][v] over the outputs inside dy.
std::vector<double> reference_dx(const ConvGeometry& g, const std::vector<float>& dy,
                                 const std::vector<float>& w) {
  std::vector<double> dx(std::size_t(g.n * g.c * g.h * g.w), 0.0);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t i = 0; i < g.oh; ++i)
        for (std::int64_t j = 0; j < g.ow; ++j) {
          const double d = dy[std::size_t(((n * g.o + o) * g.oh + i) * g.ow + j)];
          for (std::int64_t c = 0; c < g.c; ++c)
            for (std::int64_t u = 0; u < 5; ++u)
              for (std::int64_t v = 0; v < 5; ++v) {
                const std::int64_t yy = i - g.pt + u, xx = j - g.pl + v;
                if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
                dx[std::size_t(((n * g.c + c) * g.h + yy) * g.w + xx)] +=
                    d * double(w[std::size_t(((o * g.c + c) * 5 + u) * 5 + v)]);
              }
        }
  return dx;
}

// The training passes (conv2d's and conv2d_backprop_input's kernels) with Winograd on or off;
// `taken`: whether Winograd computed it.
std::vector<float> train_forward(const ConvGeometry& g, const std::vector<float>& x,
                                 const Tensor& w, bool winograd, bool* taken = nullptr) {
  detail::set_conv_winograd(winograd ? detail::WinogradUse::always : detail::WinogradUse::off);
  std::vector<float> y(std::size_t(g.n * g.o * g.oh * g.ow), -7.0f);
  const std::uint64_t calls = detail::conv_winograd_calls();
  EXPECT_TRUE(detail::onednn_conv_forward(g, x.data(), w.data<float>(), y.data(), w.storage()));
  if (taken) *taken = detail::conv_winograd_calls() == calls + 1;
  detail::set_conv_winograd(detail::WinogradUse::always);
  return y;
}
std::vector<float> train_backward_data(const ConvGeometry& g, const std::vector<float>& dy,
                                       const Tensor& w, bool winograd, bool* taken = nullptr) {
  detail::set_conv_winograd(winograd ? detail::WinogradUse::always : detail::WinogradUse::off);
  std::vector<float> dx(std::size_t(g.n * g.c * g.h * g.w), -7.0f);
  const std::uint64_t calls = detail::conv_winograd_calls();
  EXPECT_TRUE(detail::onednn_conv_backward_data(g, dy.data(), w.data<float>(), dx.data(),
                                                w.storage()));
  if (taken) *taken = detail::conv_winograd_calls() == calls + 1;
  detail::set_conv_winograd(detail::WinogradUse::always);
  return dx;
}

TEST_F(WinogradTest, TrainingPassesMatchAnF64ConvolutionAndTheDirectPath) {
  const std::vector<Case> cases = {
      {2, 32, 14, 14, 64, 2, 2, 2, 2, false, false},  // LeNet's second convolution
      {2, 8, 9, 11, 8, 2, 2, 2, 2, false, false},     // odd sizes: partial tiles
      {3, 33, 8, 10, 40, 0, 0, 0, 0, false, false},   // valid: dx pads 4
      {1, 8, 12, 7, 24, 1, 3, 0, 2, false, false},    // asymmetric pads
      {2, 16, 6, 6, 8, 3, 1, 4, 1, false, false},
      {1, 17, 5, 5, 8, 2, 2, 2, 2, false, false},
      {3, 8, 17, 16, 8, 0, 1, 1, 0, false, false},
      {1, 16, 9, 9, 16, 4, 4, 4, 4, false, false},    // full padding: dx pads 0
  };
  double worst_y = 0, worst_dx = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(name(k));
    const ConvGeometry g = geometry(k);
    const std::vector<float> x = random_floats(k.n * k.c * k.h * k.w, 51);
    const std::vector<float> wv =
        random_floats(k.o * k.c * 25, 52, std::sqrt(3.0 / double(k.c * 25)));
    const std::vector<float> dy = random_floats(g.n * g.o * g.oh * g.ow, 53);
    const Tensor w = weight_tensor(wv, k.o, k.c);
    bool taken = false;
    const std::vector<float> y = train_forward(g, x, w, true, &taken);
    EXPECT_TRUE(taken) << "forward: Winograd did not run";
    const std::vector<double> ref = reference(g, x, wv, nullptr, false);
    EXPECT_LE(scaled_error(y, ref), kTol);
    worst_y = std::max(worst_y, scaled_error(y, ref));
    const std::vector<float> y_direct = train_forward(g, x, w, false, &taken);
    EXPECT_FALSE(taken);
    EXPECT_LE(scaled_error(y, std::vector<double>(y_direct.begin(), y_direct.end())), kTol);
    // The backward data pass after the forward one with the same weights: its own transform.
    const std::vector<float> dx = train_backward_data(g, dy, w, true, &taken);
    EXPECT_TRUE(taken) << "backward data: Winograd did not run";
    const std::vector<double> dref = reference_dx(g, dy, wv);
    EXPECT_LE(scaled_error(dx, dref), kTol);
    worst_dx = std::max(worst_dx, scaled_error(dx, dref));
    const std::vector<float> dx_direct = train_backward_data(g, dy, w, false, &taken);
    EXPECT_FALSE(taken);
    EXPECT_LE(scaled_error(dx_direct, dref), 1e-5);
    EXPECT_LE(scaled_error(dx, std::vector<double>(dx_direct.begin(), dx_direct.end())), kTol);
    // And the forward again: its cached transform is still the forward one.
    EXPECT_LE(scaled_error(train_forward(g, x, w, true), ref), kTol);
  }
  std::printf("largest error / rms: forward %.3g, backward data %.3g\n", worst_y, worst_dx);
  // Pads above 4 (dx would need negative ones): the direct kernel.
  const Case k{1, 16, 6, 6, 16, 5, 2, 2, 2, false, false};
  const ConvGeometry g = geometry(k);
  const std::vector<float> wv = random_floats(16 * 16 * 25, 54, 0.1);
  const std::vector<float> dy = random_floats(g.n * g.o * g.oh * g.ow, 55);
  bool taken = true;
  const std::vector<float> dx = train_backward_data(g, dy, weight_tensor(wv, 16, 16), true, &taken);
  EXPECT_FALSE(taken);
  EXPECT_LE(scaled_error(dx, reference_dx(g, dy, wv)), 1e-5);
}

TEST_F(WinogradTest, TrainingPassesLeaveNonFiniteOperandsToTheDirectKernel) {
  const Case k{1, 16, 10, 10, 32, 2, 2, 2, 2, false, false};
  const ConvGeometry g = geometry(k);
  const float inf = std::numeric_limits<float>::infinity();
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::vector<float> x = random_floats(16 * 100, 60), dy = random_floats(32 * 100, 61);
    std::vector<float> wv = random_floats(32 * 16 * 25, 62, 0.1);
    if (variant == 0) x[3 * 100 + 45] = inf;
    if (variant == 1) dy[7 * 100 + 22] = -inf;
    if (variant == 2) dy[0] = std::numeric_limits<float>::quiet_NaN();
    if (variant == 3) wv[5 * 400 + 3 * 25 + 12] = inf;
    const Tensor w = weight_tensor(wv, 32, 16);
    bool taken_y = false, taken_dx = false;
    const std::vector<float> y = train_forward(g, x, w, true, &taken_y);
    const std::vector<float> dx = train_backward_data(g, dy, w, true, &taken_dx);
    EXPECT_EQ(taken_y, variant == 1 || variant == 2);   // only dy is not finite
    EXPECT_EQ(taken_dx, variant == 0);                  // only x is not finite
    const std::vector<float> yd = train_forward(g, x, w, false);
    const std::vector<float> dxd = train_backward_data(g, dy, w, false);
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b, bool exact) {
      std::size_t nonfinite = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        nonfinite += !std::isfinite(b[i]);
        if (std::isnan(b[i])) EXPECT_TRUE(std::isnan(a[i])) << i;
        else if (exact || !std::isfinite(b[i])) EXPECT_EQ(a[i], b[i]) << i;
        else EXPECT_NEAR(a[i], b[i], 1e-4) << i;
      }
      return nonfinite;
    };
    const std::size_t nf = same(y, yd, !taken_y) + same(dx, dxd, !taken_dx);
    EXPECT_GT(nf, 0u) << "the test did not exercise a non-finite output";
  }
}

TEST_F(WinogradTest, TrainingPassesNeedABatchThatAmortisesTheFilterTransform) {
  const ConvGeometry lenet{1, 32, 14, 14, 64, 5, 5, 14, 14, 1, 1, 2, 2, 2, 2, 1, 1, 1};
  ConvGeometry b64 = lenet, b8 = lenet;
  b64.n = 64, b8.n = 8;
  const int threads_before = get_num_threads();
  set_num_threads(1);
  EXPECT_FALSE(detail::conv_winograd_pays_per_step(lenet));
  EXPECT_TRUE(detail::conv_winograd_pays_per_step(b8));
  set_num_threads(2);  // slower within a training step at two threads (measured)
  EXPECT_FALSE(detail::conv_winograd_pays_per_step(b8));
  EXPECT_FALSE(detail::conv_winograd_pays_per_step(b64));
  set_num_threads(1);
  // Batch 1 under automatic use: the direct kernel for the training forward, Winograd for the
  // inference (fused) one.
  detail::set_conv_winograd(detail::WinogradUse::automatic);
  const std::vector<float> x = random_floats(32 * 196, 80);
  const Tensor w = weight_tensor(random_floats(64 * 32 * 25, 81, 0.05), 64, 32);
  std::vector<float> y(64 * 196);
  std::uint64_t calls = detail::conv_winograd_calls();
  ASSERT_TRUE(detail::onednn_conv_forward(lenet, x.data(), w.data<float>(), y.data(), w.storage()));
  EXPECT_EQ(detail::conv_winograd_calls(), calls);
  ASSERT_TRUE(detail::onednn_conv_forward_fused(lenet, x.data(), w.data<float>(), w.storage(),
                                                nullptr, false, y.data()));
  EXPECT_EQ(detail::conv_winograd_calls(), calls + 1);
  set_num_threads(threads_before);
}

// Gradients of a small Conv2D model (both convolutions and the backward data pass of the
// second on Winograd under automatic use) against Winograd off: relative 1e-4.
TEST_F(WinogradTest, ModelGradientsMatchTheDirectPath) {
  const int threads_before = get_num_threads();
  set_num_threads(1);  // where these small convolutions pay
  detail::set_conv_winograd(detail::WinogradUse::automatic);
  nn::Conv2D c1(16, 5, {.padding = "same", .activation = nn::relu,
                        .kernel_initializer = nn::init::glorot_uniform(71)});
  nn::Conv2D c2(32, 5, {.padding = "same", .activation = nn::relu,
                        .kernel_initializer = nn::init::glorot_uniform(72)});
  nn::Conv2D c3(32, 5, {.kernel_initializer = nn::init::glorot_uniform(73)});
  const Tensor x = cast(rand_tensor({8, 3, 12, 12}, 74), DType::f32);
  c3(c2(c1(x)));  // builds the layers' weights
  std::vector<Variable> vars = c1.parameters();
  for (auto& v : c2.parameters()) vars.push_back(v);
  for (auto& v : c3.parameters()) vars.push_back(v);
  const auto grads = [&](bool winograd, std::uint64_t* calls) {
    detail::set_conv_winograd(winograd ? detail::WinogradUse::automatic
                                       : detail::WinogradUse::off);
    const std::uint64_t before = detail::conv_winograd_calls();
    GradientTape tape;
    const Tensor y = c3(c2(c1(x)));
    const Tensor r = cast(rand_tensor(y.shape(), 75), DType::f32);
    std::vector<Tensor> g = tape.gradient(sum(y * r), vars);
    *calls = detail::conv_winograd_calls() - before;
    return g;
  };
  std::uint64_t on_calls = 0, off_calls = 0;
  const std::vector<Tensor> on = grads(true, &on_calls);
  const std::vector<Tensor> off = grads(false, &off_calls);
  set_num_threads(threads_before);
  // c2 (16 -> 32) and c3 (32 -> 32, 8x8 outputs) forward (the fused op's kernel); the backward
  // data of c3 (32 -> 32 at 12x12, 1152 output pixels: pays_per_step on one thread), not c2's
  // (32 -> 16: fewer than 32 outputs).
  EXPECT_EQ(on_calls, 3u);
  EXPECT_EQ(off_calls, 0u);
  ASSERT_EQ(on.size(), 6u);
  ASSERT_EQ(off.size(), 6u);
  for (std::size_t k = 0; k < on.size(); ++k) {
    const std::vector<double> a = on[k].to_vector<double>(), b = off[k].to_vector<double>();
    double ss = 0, worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      ss += b[i] * b[i];
      worst = std::max(worst, std::abs(a[i] - b[i]));
    }
    EXPECT_LE(worst, 1e-4 * std::sqrt(ss / double(b.size()))) << "gradient " << k;
  }
}

// Not a check: times the training passes with Winograd on and off, the weights updated before
// each call as by an optimiser step (so Winograd's filter transforms run each time; "same w":
// Winograd without them). Run with --gtest_also_run_disabled_tests --gtest_filter=*TrainingTiming*.
TEST_F(WinogradTest, DISABLED_TrainingTiming) {
  struct G {
    std::int64_t n, c, h, o;
  };
  const std::vector<G> gs = {{64, 32, 14, 64}, {64, 16, 14, 32}, {64, 64, 7, 128},
                             {32, 32, 14, 64}, {16, 32, 14, 64}, {8, 32, 14, 64},
                             {1, 32, 8, 64}};
  for (const G& s : gs) {
    const Case k{s.n, s.c, s.h, s.h, s.o, 2, 2, 2, 2, false, false};
    const ConvGeometry g = geometry(k);
    const std::vector<float> x = random_floats(k.n * k.c * k.h * k.w, 1);
    const std::vector<float> dy = random_floats(g.n * g.o * g.oh * g.ow, 3);
    Tensor w = weight_tensor(random_floats(k.o * k.c * 25, 2, 0.1), k.o, k.c);
    std::vector<float> y(dy.size()), dx(x.size());
    double best[3][2] = {{1e30, 1e30}, {1e30, 1e30}, {1e30, 1e30}};  // direct, on, on same w
    const int reps = s.n == 1 ? 100 : 5;
    for (int round = 0; round < 3; ++round)
      for (int mode = 0; mode < 3; ++mode) {
        detail::set_conv_winograd(mode ? detail::WinogradUse::automatic
                                       : detail::WinogradUse::off);
        for (int pass = 0; pass < 2; ++pass) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) {
            if (mode < 2) w.storage()->version.fetch_add(1);  // as after an optimiser step
            if (pass == 0)
              detail::onednn_conv_forward(g, x.data(), w.data<float>(), y.data(), w.storage());
            else
              detail::onednn_conv_backward_data(g, dy.data(), w.data<float>(), dx.data(),
                                                w.storage());
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() / reps;
          best[mode][pass] = std::min(best[mode][pass], us);
        }
      }
    std::printf("n%ld c%ld hw%ld o%ld: forward direct %.0f us, winograd %.0f (%.2fx; same w %.0f);"
                " backward data direct %.0f, winograd %.0f (%.2fx; same w %.0f)\n",
                long(s.n), long(s.c), long(s.h), long(s.o), best[0][0], best[1][0],
                best[0][0] / best[1][0], best[2][0], best[0][1], best[1][1],
                best[0][1] / best[1][1], best[2][1]);
  }
}

// Not a check: times the fused path with Winograd on and off over geometries, to choose where it
// is taken (run with --gtest_also_run_disabled_tests --gtest_filter=*Timing*).
TEST_F(WinogradTest, DISABLED_Timing) {
  struct G {
    std::int64_t n, c, h, o;
  };
  const std::vector<G> gs = {{1, 8, 28, 8},    {1, 8, 28, 16},   {1, 16, 28, 16},
                             {1, 16, 14, 32},  {1, 32, 14, 32},  {1, 32, 14, 64},
                             {1, 64, 14, 64},  {1, 64, 7, 128},  {1, 128, 7, 128},
                             {1, 33, 14, 64},  {1, 128, 14, 128}, {1, 32, 4, 64},
                             {8, 32, 14, 64},  {8, 8, 28, 8},    {1, 24, 14, 24},
                             {1, 3, 32, 32},   {1, 32, 56, 32}};
  for (const G& s : gs) {
    const Case k{s.n, s.c, s.h, s.h, s.o, 2, 2, 2, 2, true, true};
    const ConvGeometry g = geometry(k);
    const std::vector<float> x = random_floats(k.n * k.c * k.h * k.w, 1);
    const Tensor w = weight_tensor(random_floats(k.o * k.c * 25, 2, 0.1), k.o, k.c);
    const std::vector<float> b = random_floats(k.o, 3);
    std::vector<float> y(std::size_t(g.n * g.o * g.oh * g.ow));
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 5; ++round)
      for (int on = 0; on < 2; ++on) {
        detail::set_conv_winograd(on ? detail::WinogradUse::always : detail::WinogradUse::off);
        const int reps = 50;
        detail::onednn_conv_forward_fused(g, x.data(), w.data<float>(), w.storage(), b.data(),
                                          true, y.data());
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
          detail::onednn_conv_forward_fused(g, x.data(), w.data<float>(), w.storage(), b.data(),
                                            true, y.data());
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count() / reps;
        best[on] = std::min(best[on], us);
      }
    std::printf("n%ld c%ld hw%ld o%ld: direct %.1f us, winograd %.1f us (%.2fx)%s\n", long(s.n),
                long(s.c), long(s.h), long(s.o), best[0], best[1], best[0] / best[1],
                detail::conv_winograd_pays(g) ? "" : " [not taken automatically]");
  }
}

}  // namespace
}  // namespace soma
