// conv2d, conv2d_transpose, the convolution backprop ops and pooling: forward passes against
// plain nested-loop references, gradient checks in f64, second derivatives, shapes and errors.
#include <array>
#include <cmath>
#include <limits>

#include "soma/nn_ops.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::noncontiguous;
using testing::rand_tensor;
using Pads = std::array<std::int64_t, 4>;  // top, bottom, left, right

// TensorFlow's "same" padding, written out independently of the library.
Pads same_pads(std::int64_t h, std::int64_t w, std::int64_t kh, std::int64_t kw, Size2 s,
               Size2 d) {
  auto one = [](std::int64_t n, std::int64_t k, std::int64_t st, std::int64_t di) {
    std::int64_t out = (n + st - 1) / st;
    std::int64_t total = std::max<std::int64_t>((out - 1) * st + (k - 1) * di + 1 - n, 0);
    return std::pair{total / 2, total - total / 2};
  };
  auto [t, b] = one(h, kh, s.h, d.h);
  auto [l, r] = one(w, kw, s.w, d.w);
  return {t, b, l, r};
}

// The definition of a grouped, strided, dilated, padded cross-correlation: seven loops.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, Size2 s, Pads p, Size2 d,
                    std::int64_t groups) {
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t O = w.dim(0), KH = w.dim(2), KW = w.dim(3);
  const std::int64_t OH = 1 + (H + p[0] + p[1] - d.h * (KH - 1) - 1) / s.h;
  const std::int64_t OW = 1 + (W + p[2] + p[3] - d.w * (KW - 1) - 1) / s.w;
  const std::int64_t cg = C / groups, og = O / groups;
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(std::size_t(N * O * OH * OW), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oy = 0; oy < OH; ++oy)
        for (std::int64_t ox = 0; ox < OW; ++ox) {
          double acc = 0;
          const std::int64_t g = o / og;
          for (std::int64_t c = 0; c < cg; ++c)
            for (std::int64_t i = 0; i < KH; ++i)
              for (std::int64_t j = 0; j < KW; ++j) {
                const std::int64_t iy = oy * s.h - p[0] + i * d.h;
                const std::int64_t ix = ox * s.w - p[2] + j * d.w;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const std::int64_t ci = g * cg + c;
                acc += xv[std::size_t(((n * C + ci) * H + iy) * W + ix)] *
                       wv[std::size_t(((o * cg + c) * KH + i) * KW + j)];
              }
          y[std::size_t(((n * O + o) * OH + oy) * OW + ox)] = acc;
        }
  return constant(y, {N, O, OH, OW});
}

// The transposed convolution as a scatter: every input pixel adds its kernel-weighted value to
// the output window it came from. w is [C_in, C_out/groups, KH, KW].
Tensor naive_conv2d_transpose(const Tensor& x, const Tensor& w, Size2 s, Pads p, Size2 d,
                              std::int64_t groups, std::int64_t OH, std::int64_t OW) {
  const std::int64_t N = x.dim(0), CI = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t cog = w.dim(1), KH = w.dim(2), KW = w.dim(3);
  const std::int64_t cig = CI / groups, CO = cog * groups;
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(std::size_t(N * CO * OH * OW), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t ci = 0; ci < CI; ++ci)
      for (std::int64_t iy = 0; iy < H; ++iy)
        for (std::int64_t ix = 0; ix < W; ++ix)
          for (std::int64_t co = 0; co < cog; ++co)
            for (std::int64_t i = 0; i < KH; ++i)
              for (std::int64_t j = 0; j < KW; ++j) {
                const std::int64_t oy = iy * s.h - p[0] + i * d.h;
                const std::int64_t ox = ix * s.w - p[2] + j * d.w;
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                const std::int64_t oc = (ci / cig) * cog + co;
                y[std::size_t(((n * CO + oc) * OH + oy) * OW + ox)] +=
                    xv[std::size_t(((n * CI + ci) * H + iy) * W + ix)] *
                    wv[std::size_t(((ci * cog + co) * KH + i) * KW + j)];
              }
  return constant(y, {N, CO, OH, OW});
}

struct ConvCase {
  std::string name;
  Shape x, w;
  Size2 strides = 1;
  Padding padding = "valid";
  Size2 dilation = 1;
  std::int64_t groups = 1;
};

Pads pads_of(const ConvCase& c) {
  switch (c.padding.mode()) {
    case Padding::Mode::valid: return {0, 0, 0, 0};
    case Padding::Mode::same:
      return same_pads(c.x[2], c.x[3], c.w[2], c.w[3], c.strides, c.dilation);
    default: return c.padding.pads();
  }
}

std::vector<ConvCase> conv_cases() {
  return {
      {"valid_stride1", {2, 3, 7, 6}, {4, 3, 3, 3}},
      {"valid_stride2", {2, 3, 9, 8}, {4, 3, 3, 3}, 2},
      {"valid_stride_2x3", {1, 2, 9, 10}, {3, 2, 3, 2}, {2, 3}},
      {"same_stride1", {2, 3, 6, 7}, {5, 3, 3, 3}, 1, "same"},
      {"same_stride2_even_kernel", {2, 2, 7, 8}, {3, 2, 4, 4}, 2, "same"},
      {"explicit_asymmetric", {1, 3, 5, 6}, {2, 3, 3, 2}, 1, Padding(1, 2, 0, 1)},
      {"dilation2_same", {2, 2, 9, 9}, {3, 2, 3, 3}, 1, "same", 2},
      {"dilation_stride_explicit", {1, 2, 11, 10}, {2, 2, 3, 2}, 2, Padding(1), {2, 3}},
      {"groups2", {2, 4, 6, 6}, {6, 2, 3, 3}, 1, "same", 1, 2},
      {"depthwise", {2, 3, 7, 7}, {6, 1, 3, 3}, 2, "same", 1, 3},
      {"pointwise_1x1", {3, 5, 4, 6}, {7, 5, 1, 1}},
      {"pointwise_groups", {2, 4, 3, 3}, {4, 2, 1, 1}, 1, "valid", 1, 2},
      {"1x1_stride2", {2, 3, 7, 7}, {2, 3, 1, 1}, 2},
      {"batch8_threads", {8, 3, 10, 10}, {4, 3, 3, 3}, 1, "same"},
      {"kernel_equals_input", {2, 2, 3, 3}, {3, 2, 3, 3}},
  };
}

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class Conv2dForward : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dForward, MatchesNaiveLoopsInF64) {
  const ConvCase& c = GetParam();
  Tensor x = rand_tensor(c.x, 1), w = rand_tensor(c.w, 2);
  Tensor y = conv2d(x, w, c.strides, c.padding, c.dilation, c.groups);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_TRUE(all_close(y, naive_conv2d(x, w, c.strides, pads_of(c), c.dilation, c.groups),
                        1e-12, 1e-12));
}

TEST_P(Conv2dForward, MatchesNaiveLoopsInF32) {
  const ConvCase& c = GetParam();
  Tensor x = rand_tensor(c.x, 3), w = rand_tensor(c.w, 4);
  Tensor y = conv2d(cast(x, DType::f32), cast(w, DType::f32), c.strides, c.padding, c.dilation,
                    c.groups);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, naive_conv2d(x, w, c.strides, pads_of(c), c.dilation, c.groups),
                        1e-5, 1e-5));
}

TEST_P(Conv2dForward, NonContiguousInputsGiveTheSameResult) {
  const ConvCase& c = GetParam();
  Tensor x = rand_tensor(c.x, 5), w = rand_tensor(c.w, 6);
  Tensor y = conv2d(noncontiguous(x), noncontiguous(w), c.strides, c.padding, c.dilation,
                    c.groups);
  EXPECT_TRUE(all_close(y, naive_conv2d(x, w, c.strides, pads_of(c), c.dilation, c.groups),
                        1e-12, 1e-12));
}

TEST_P(Conv2dForward, GradientsMatchFiniteDifferences) {
  const ConvCase& c = GetParam();
  if (numel(c.x) > 1000) GTEST_SKIP() << "large case: forward only (finite differences are slow)";
  Tensor x = rand_tensor(c.x, 7), w = rand_tensor(c.w, 8);
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], c.strides, c.padding, c.dilation, c.groups);
      },
      {x, w}));
}

INSTANTIATE_TEST_SUITE_P(Configs, Conv2dForward, ::testing::ValuesIn(conv_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Conv2d, TransposedViewInputMatchesReference) {
  // An NHWC buffer seen as NCHW: strides that are not just padded rows.
  Tensor nhwc = rand_tensor({2, 5, 6, 3}, 9);
  Tensor x = transpose(nhwc, {0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  Tensor w = rand_tensor({4, 3, 3, 3}, 10);
  EXPECT_TRUE(all_close(conv2d(x, w, 1, "same"),
                        naive_conv2d(contiguous(x), w, 1, same_pads(5, 6, 3, 3, 1, 1), 1, 1),
                        1e-12, 1e-12));
}

TEST(Conv2d, BFloat16ComputesThroughF32) {
  Tensor x = rand_tensor({1, 2, 5, 5}, 11), w = rand_tensor({3, 2, 3, 3}, 12);
  Tensor y = conv2d(cast(x, DType::bf16), cast(w, DType::bf16), 1, "same");
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor ref = naive_conv2d(cast(cast(x, DType::bf16), DType::f64),
                            cast(cast(w, DType::bf16), DType::f64), 1, {1, 1, 1, 1}, 1, 1);
  EXPECT_TRUE(all_close(y, ref, 0.05, 0.02));
}

TEST(Conv2d, MixedDtypesPromote) {
  Tensor x = rand_tensor({1, 1, 4, 4}, 13, -1, 1, DType::f32), w = rand_tensor({1, 1, 2, 2}, 14);
  EXPECT_EQ(conv2d(x, w).dtype(), DType::f64);
}

TEST(Conv2d, OutputShapeFollowsTheRule) {
  // H' = 1 + (H - F + 2P) / S
  EXPECT_EQ(conv2d_output_shape({1, 3, 28, 28}, {8, 3, 5, 5}, 1, 2), (Shape{1, 8, 28, 28}));
  EXPECT_EQ(conv2d_output_shape({1, 3, 32, 32}, {8, 3, 3, 3}, 2, 1), (Shape{1, 8, 16, 16}));
  EXPECT_EQ(conv2d_output_shape({4, 3, 32, 30}, {8, 3, 5, 3}, 3), (Shape{4, 8, 10, 10}));
  // dilation: effective kernel (F - 1) * d + 1
  EXPECT_EQ(conv2d_output_shape({1, 1, 10, 10}, {1, 1, 3, 3}, 1, "valid", 2),
            (Shape{1, 1, 6, 6}));
  Tensor y = conv2d(zeros({2, 3, 32, 32}), zeros({8, 3, 3, 3}), 2, 1);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 16, 16}));
}

TEST(Conv2d, SamePaddingGivesCeilOfInputOverStride) {
  for (std::int64_t h : {5, 6, 7, 8})
    for (std::int64_t s : {1, 2, 3})
      EXPECT_EQ(conv2d_output_shape({1, 1, h, h}, {1, 1, 4, 3}, s, "same"),
                (Shape{1, 1, (h + s - 1) / s, (h + s - 1) / s}));
}

TEST(Conv2d, SamePaddingPutsTheOddRowAtTheBottomRight) {
  // H=6, k=3, s=2: out 3, total padding (3-1)*2 + 3 - 6 = 1 -> top 0, bottom 1.
  EXPECT_EQ(resolve_padding("same", 6, 6, 3, 2), (Pads{0, 1, 0, 1}));
  EXPECT_EQ(resolve_padding("same", 5, 8, {3, 4}, 1), (Pads{1, 1, 1, 2}));
  EXPECT_EQ(resolve_padding("valid", 5, 8, 3, 1), (Pads{0, 0, 0, 0}));
}

TEST(Conv2d, SecondDerivativeMatchesFiniteDifferences) {
  // f(x, w) = d/dx sum(conv2d(x, w)^2): differentiating it goes through the gradients of
  // conv2d_backprop_input and conv2d_backprop_filter.
  Tensor x = rand_tensor({2, 2, 5, 5}, 15), w = rand_tensor({3, 2, 3, 3}, 16);
  auto grad_x = [](const std::vector<Tensor>& in) {
    GradientTape tape;
    tape.watch(in);
    Tensor y = conv2d(in[0], in[1], 2, "same");
    return tape.gradient(sum(y * y), in[0]);
  };
  auto grad_w = [](const std::vector<Tensor>& in) {
    GradientTape tape;
    tape.watch(in);
    Tensor y = conv2d(in[0], in[1], 1, Padding(1, 0, 2, 1), 2);
    return tape.gradient(sum(y * y), in[1]);
  };
  EXPECT_TRUE(check_gradients(grad_x, {x, w}));
  EXPECT_TRUE(check_gradients(grad_w, {x, w}));
}

TEST(Conv2dBackprop, InputOpGradientsMatchFiniteDifferences) {
  Tensor g = rand_tensor({2, 4, 3, 3}, 17), w = rand_tensor({4, 1, 3, 3}, 18);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return conv2d_backprop_input(in[0], in[1], {2, 2, 6, 6}, 2, "same", 1, 2);
      },
      {g, w}));
}

TEST(Conv2dBackprop, FilterOpGradientsMatchFiniteDifferences) {
  Tensor x = rand_tensor({2, 2, 6, 5}, 19), g = rand_tensor({2, 3, 4, 3}, 20);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return conv2d_backprop_filter(in[0], in[1], {3, 2, 3, 3}, 1, "valid");
      },
      {x, g}));
}

TEST(Conv2dBackprop, InputIsTheAdjointOfConv2d) {
  // <conv2d(x, w), g> == <x, conv2d_backprop_input(g, w)>
  Tensor x = rand_tensor({2, 4, 7, 6}, 21), w = rand_tensor({6, 2, 3, 2}, 22);
  Tensor y = conv2d(x, w, {2, 1}, "same", {1, 2}, 2);
  Tensor g = rand_tensor(y.shape(), 23);
  Tensor dx = conv2d_backprop_input(g, w, x.shape(), {2, 1}, "same", {1, 2}, 2);
  EXPECT_NEAR(sum(y * g).item<double>(), sum(x * dx).item<double>(), 1e-10);
}

TEST(Conv2dBackprop, FilterGradientSumsOverTheBatch) {
  // Big enough that the images are split across threads, each with its own accumulator.
  Tensor x = rand_tensor({6, 4, 12, 12}, 24), w = rand_tensor({8, 4, 3, 3}, 25);
  Tensor g = rand_tensor({6, 8, 12, 12}, 26);
  Tensor dw = conv2d_backprop_filter(x, g, w.shape(), 1, "same");
  Tensor sum_each = zeros(w.shape(), DType::f64);
  for (std::int64_t n = 0; n < 6; ++n)
    sum_each = sum_each + conv2d_backprop_filter(x.slice(0, n, n + 1), g.slice(0, n, n + 1),
                                                 w.shape(), 1, "same");
  EXPECT_TRUE(all_close(dw, sum_each, 1e-12, 1e-12));
}

// ---- conv2d_transpose ----
TEST(Conv2dTranspose, OutputShapesFollowKeras) {
  Tensor x = zeros({1, 2, 5, 5}), w = zeros({2, 3, 3, 3});
  EXPECT_EQ(conv2d_transpose(x, w, 2, "valid").shape(), (Shape{1, 3, 11, 11}));
  EXPECT_EQ(conv2d_transpose(x, w, 2, "same").shape(), (Shape{1, 3, 10, 10}));
  EXPECT_EQ(conv2d_transpose(x, w, 2, "same", Size2(1)).shape(), (Shape{1, 3, 10, 10}));
  EXPECT_EQ(conv2d_transpose(x, w, 2, "valid", Size2(1)).shape(), (Shape{1, 3, 12, 12}));
  EXPECT_EQ(conv2d_transpose(x, w, 1, "same").shape(), (Shape{1, 3, 5, 5}));
  // kernel smaller than the stride: valid gives H * s
  EXPECT_EQ(conv2d_transpose(x, zeros({2, 3, 2, 2}), 3, "valid").shape(), (Shape{1, 3, 15, 15}));
  EXPECT_EQ(conv2d_transpose(x, w, 2, Padding(1)).shape(), (Shape{1, 3, 9, 9}));
}

TEST(Conv2dTranspose, MatchesNaiveScatter) {
  Tensor x = rand_tensor({2, 4, 4, 5}, 27), w = rand_tensor({4, 3, 3, 2}, 28);
  Tensor y = conv2d_transpose(x, w, {2, 3}, "valid", std::nullopt, 1, 2);
  ASSERT_EQ(y.shape(), (Shape{2, 6, 9, 15}));
  EXPECT_TRUE(all_close(y, naive_conv2d_transpose(x, w, {2, 3}, {0, 0, 0, 0}, 1, 2, 9, 15),
                        1e-12, 1e-12));
}

TEST(Conv2dTranspose, SamePaddingMatchesNaiveScatter) {
  Tensor x = rand_tensor({1, 2, 4, 4}, 29), w = rand_tensor({2, 3, 4, 4}, 30);
  Tensor y = conv2d_transpose(x, w, 2, "same");
  ASSERT_EQ(y.shape(), (Shape{1, 3, 8, 8}));
  // The forward convolution 8 -> 4 with k=4, s=2 "same" pads 1 top/left, 1 bottom/right.
  EXPECT_TRUE(all_close(y, naive_conv2d_transpose(x, w, 2, same_pads(8, 8, 4, 4, 2, 1), 1, 1, 8, 8),
                        1e-12, 1e-12));
}

TEST(Conv2dTranspose, GradientsMatchFiniteDifferences) {
  Tensor x = rand_tensor({2, 2, 3, 4}, 31), w = rand_tensor({2, 3, 3, 3}, 32);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return conv2d_transpose(in[0], in[1], 2, "same", Size2(1));
      },
      {x, w}));
}

TEST(Conv2dTranspose, RejectsOutputPaddingNotBelowStride) {
  try {
    conv2d_transpose(zeros({1, 2, 4, 4}), zeros({2, 3, 3, 3}), 2, "same", Size2(2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_transpose: output_padding [2, 2]"),
              std::string::npos)
        << e.what();
  }
}

// ---- pooling ----
Tensor naive_pool(const Tensor& x, Size2 k, Size2 s, Pads p, bool is_max) {
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t OH = 1 + (H + p[0] + p[1] - k.h) / s.h;
  const std::int64_t OW = 1 + (W + p[2] + p[3] - k.w) / s.w;
  std::vector<double> xv = x.to_vector<double>(), y;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t oy = 0; oy < OH; ++oy)
        for (std::int64_t ox = 0; ox < OW; ++ox) {
          double best = -std::numeric_limits<double>::infinity(), total = 0;
          int count = 0;
          for (std::int64_t i = 0; i < k.h; ++i)
            for (std::int64_t j = 0; j < k.w; ++j) {
              const std::int64_t iy = oy * s.h - p[0] + i, ix = ox * s.w - p[2] + j;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              const double v = xv[std::size_t(((n * C + c) * H + iy) * W + ix)];
              best = std::max(best, v);
              total += v;
              ++count;
            }
          y.push_back(is_max ? best : total / count);
        }
  return constant(y, {N, C, OH, OW});
}

TEST(MaxPool2d, ValidMatchesNaiveLoops) {
  Tensor x = rand_tensor({2, 3, 7, 8}, 33);
  EXPECT_TRUE(all_close(max_pool2d(x, 2), naive_pool(x, 2, 2, {0, 0, 0, 0}, true)));
  EXPECT_TRUE(all_close(max_pool2d(x, 3, Size2(1)), naive_pool(x, 3, 1, {0, 0, 0, 0}, true)));
  EXPECT_TRUE(all_close(max_pool2d(x, {2, 3}, Size2{1, 2}),
                        naive_pool(x, {2, 3}, {1, 2}, {0, 0, 0, 0}, true)));
}

TEST(MaxPool2d, SameMatchesNaiveLoopsIgnoringPadding) {
  Tensor x = rand_tensor({2, 2, 7, 5}, 34, -3.0, -1.0);  // all negative: padding zeros would win
  Tensor y = max_pool2d(x, 3, Size2(2), "same");
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4, 3}));
  EXPECT_TRUE(all_close(y, naive_pool(x, 3, 2, same_pads(7, 5, 3, 3, 2, 1), true)));
}

TEST(MaxPool2d, F32AndNonContiguousInputs) {
  Tensor x = rand_tensor({2, 3, 6, 6}, 35);
  EXPECT_TRUE(all_close(max_pool2d(noncontiguous(cast(x, DType::f32)), 2),
                        naive_pool(x, 2, 2, {0, 0, 0, 0}, true), 1e-6));
}

TEST(MaxPool2d, GradientsMatchFiniteDifferences) {
  Tensor x = rand_tensor({2, 2, 5, 6}, 36);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 2, Size2(1), "same"); }, {x}));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 2}); }, {x}));
}

TEST(MaxPool2d, TiesSendTheGradientToTheFirstMaximum) {
  GradientTape tape;
  Tensor x = ones({1, 1, 2, 2}, DType::f64);
  tape.watch(x);
  Tensor g = tape.gradient(sum(max_pool2d(x, 2)), x);
  EXPECT_TRUE(all_close(g, {1, 0, 0, 0}));
}

TEST(MaxPool2d, GradOpIsDifferentiableInTheIncomingGradient) {
  Tensor x = rand_tensor({1, 2, 4, 5}, 37), g = rand_tensor({1, 2, 2, 3}, 38);
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return max_pool2d_grad(x, in[0], 2, Size2(2), "same"); },
      {g}));
}

TEST(MaxPool2d, SecondDerivativeThroughTheTapeIsZero) {
  Tensor x = rand_tensor({1, 1, 4, 4}, 39);
  GradientTape outer;
  outer.watch(x);
  Tensor gx;
  {
    GradientTape inner;
    inner.watch(x);
    gx = inner.gradient(sum(square(max_pool2d(x, 2))), x);  // 2 * max at each argmax
  }
  Tensor gg = outer.gradient(sum(gx), x, UnconnectedGradients::Zero);
  // d/dx sum(2 * x[argmax]) = 2 at each argmax, 0 elsewhere.
  EXPECT_TRUE(all_close(gg, cast(gx != 0.0, DType::f64) * 2.0));
}

TEST(AvgPool2d, ValidMatchesNaiveLoops) {
  Tensor x = rand_tensor({2, 3, 6, 7}, 40);
  EXPECT_TRUE(all_close(avg_pool2d(x, 2), naive_pool(x, 2, 2, {0, 0, 0, 0}, false), 1e-12));
  EXPECT_TRUE(all_close(avg_pool2d(x, {3, 2}, Size2{1, 2}),
                        naive_pool(x, {3, 2}, {1, 2}, {0, 0, 0, 0}, false), 1e-12));
}

TEST(AvgPool2d, SameAveragesOnlyTheRealElements) {
  Tensor x = ones({1, 1, 3, 3}, DType::f64);
  // Corners of a 3x3 "same" window see 4 real elements; TF divides by 4, giving exactly 1.
  EXPECT_TRUE(all_close(avg_pool2d(x, 3, Size2(1), "same"), std::vector<double>(9, 1.0)));
  Tensor r = rand_tensor({2, 2, 7, 5}, 41);
  EXPECT_TRUE(all_close(avg_pool2d(r, 3, Size2(2), "same"),
                        naive_pool(r, 3, 2, same_pads(7, 5, 3, 3, 2, 1), false), 1e-12));
}

TEST(AvgPool2d, GradientsMatchFiniteDifferences) {
  Tensor x = rand_tensor({2, 2, 5, 6}, 42);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, Size2(2), "same"); }, {x}));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 2); }, {x}));
}

TEST(AvgPool2d, GradOpIsDifferentiable) {
  Tensor g = rand_tensor({1, 2, 3, 3}, 43);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d_grad(in[0], {1, 2, 5, 5}, 3, Size2(2), "same");
      },
      {g}));
}

TEST(Pool2d, OutputShape) {
  EXPECT_EQ(pool2d_output_shape({4, 3, 28, 28}, 2), (Shape{4, 3, 14, 14}));
  EXPECT_EQ(pool2d_output_shape({4, 3, 7, 7}, 2), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(pool2d_output_shape({4, 3, 7, 7}, 2, std::nullopt, "same"), (Shape{4, 3, 4, 4}));
  EXPECT_EQ(pool2d_output_shape({1, 1, 7, 9}, 3, Size2(1)), (Shape{1, 1, 5, 7}));
}

// ---- errors ----
using soma::testing::error_of;

TEST(Conv2dErrors, RankOtherThanFourIsRejected) {
  EXPECT_EQ(error_of([] { conv2d(zeros({3, 8, 8}), zeros({4, 3, 3, 3})); }),
            "conv2d: input must be 4-d [N, C, H, W], got shape [3, 8, 8]");
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3})); }),
            "conv2d: kernel must be 4-d [O, C/groups, KH, KW], got shape [4, 3, 3]");
}

TEST(Conv2dErrors, ChannelMismatchNamesBothShapesAndGroups) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})); }),
            "conv2d: channel mismatch: input [1, 3, 8, 8], kernel [4, 2, 3, 3], groups=1: the "
            "input has 3 channels, so kernel dim 1 must be C/groups = 3, got 2");
}

TEST(Conv2dErrors, GroupsMustDivideChannels) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 4, 8, 8}), zeros({6, 2, 3, 3}), 1, "valid", 1, 3); }),
            "conv2d: groups=3 does not divide the input's 4 channels (input [1, 4, 8, 8], kernel "
            "[6, 2, 3, 3])");
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 4, 8, 8}), zeros({5, 2, 3, 3}), 1, "valid", 1, 2); }),
            "conv2d: groups=2 does not divide the kernel's 5 output channels (input [1, 4, 8, "
            "8], kernel [5, 2, 3, 3])");
  EXPECT_NE(error_of([] { conv2d(zeros({1, 4, 8, 8}), zeros({4, 2, 3, 3}), 1, "valid", 1, 0); })
                .find("conv2d: groups must be >= 1, got 0"),
            std::string::npos);
}

TEST(Conv2dErrors, KernelLargerThanPaddedInput) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 3})); }),
            "conv2d: kernel window 5x3 (5x3 with dilation [1, 1]) is larger than the padded "
            "input 4x4 (input [1, 1, 4, 4], kernel [1, 1, 5, 3], padding [0, 0, 0, 0])");
  EXPECT_NE(error_of([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), 1, "valid", 3); })
                .find("kernel window 7x7 (3x3 with dilation [3, 3]) is larger"),
            std::string::npos);
  // Padding makes it fit.
  EXPECT_EQ(conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 3}), 1, "same").shape(),
            (Shape{1, 1, 4, 4}));
}

TEST(Conv2dErrors, NonPositiveStridesAndDilationAreRejected) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), {1, 0}); }),
            "conv2d: strides must be positive, got [1, 0]");
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), 1, "same", -1); }),
            "conv2d: dilation must be positive, got [-1, -1]");
}

TEST(Conv2dErrors, BadPaddingIsRejected) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), 1, "full"); }),
            "padding: unknown padding 'full' (expected \"valid\", \"same\" or explicit amounts "
            "{top, bottom, left, right})");
  EXPECT_EQ(error_of([] { Padding p(1, -1, 0, 0); }),
            "padding: explicit amounts must be >= 0, got [1, -1, 0, 0]");
}

TEST(Conv2dErrors, IntegerInputsAreRejected) {
  EXPECT_EQ(error_of([] { conv2d(zeros({1, 1, 4, 4}, DType::i32), zeros({1, 1, 3, 3}, DType::i32)); }),
            "conv2d: dtype i32 is not supported (expected f32, f64, f16 or bf16)");
}

TEST(Conv2dErrors, BackpropInputChecksTheGradientShape) {
  EXPECT_EQ(error_of([] {
              conv2d_backprop_input(zeros({1, 2, 3, 3}), zeros({2, 1, 3, 3}), {1, 1, 6, 6});
            }),
            "conv2d_backprop_input: gradient shape [1, 2, 3, 3] does not match the "
            "convolution's output [1, 2, 4, 4] (input [1, 1, 6, 6], kernel [2, 1, 3, 3])");
}

TEST(Pool2dErrors, WindowLargerThanInputAndBadArguments) {
  EXPECT_EQ(error_of([] { max_pool2d(zeros({1, 1, 3, 3}), 4); }),
            "max_pool2d: pool window 4x4 is larger than the padded input 3x3 (input [1, 1, 3, "
            "3], padding [0, 0, 0, 0])");
  EXPECT_EQ(error_of([] { avg_pool2d(zeros({3, 3}), 2); }),
            "avg_pool2d: input must be 4-d [N, C, H, W], got shape [3, 3]");
  EXPECT_EQ(error_of([] { max_pool2d(zeros({1, 1, 4, 4}), 2, Size2(0)); }),
            "max_pool2d: strides must be positive, got [0, 0]");
  EXPECT_EQ(error_of([] { avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}); }),
            "avg_pool2d: pool_size must be positive, got [0, 2]");
}

}  // namespace
}  // namespace soma
