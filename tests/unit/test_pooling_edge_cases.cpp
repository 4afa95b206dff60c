// Pooling at its edges: empty inputs and windows that hang over the padding as far as the shape
// rule allows. The CPU kernels once read past the data here (a window over an empty H or W holds
// only padding, yet the kernel read its "first element").
//
// Semantics (as PyTorch and TensorFlow): an empty batch or channel dim gives an empty output; an
// empty H or W is refused by the shape rule with an error naming the op and shapes, because every
// output window would hold only padding (no maximum, nothing to average). Padding must be smaller
// than the pool window, so with H, W >= 1 every window holds at least one real element.
#include <cmath>
#include <limits>
#include <string>

#include "soma/nn_ops.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using Ints = std::vector<std::int64_t>;
using testing::all_close;
using testing::error_of;
using testing::rand_tensor;

Attrs pool_attrs(Ints pool, Ints strides, Ints pads) {
  return {{"pool", pool}, {"strides", strides}, {"pads", pads}};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- empty batch or channels: empty output, every op, both paths (2x2 fast path and general) ----
void expect_empty_pooling(const Shape& xs, DType dt) {
  SCOPED_TRACE("input " + shape_str(xs) + " " + dtype_name(dt));
  for (const Padding& pad : {Padding("valid"), Padding("same"), Padding(1)}) {
    for (Size2 pool : {Size2(2), Size2{3, 2}}) {
      const Tensor x = zeros(xs, dt);
      const Shape ys = pool2d_output_shape(xs, pool, std::nullopt, pad);
      EXPECT_EQ(numel(ys), 0);
      const Tensor mx = max_pool2d(x, pool, std::nullopt, pad);
      const Tensor av = avg_pool2d(x, pool, std::nullopt, pad);
      EXPECT_EQ(mx.shape(), ys);
      EXPECT_EQ(av.shape(), ys);
      const Tensor g = zeros(ys, dt);
      EXPECT_EQ(max_pool2d_grad(x, g, pool, std::nullopt, pad).shape(), xs);
      EXPECT_EQ(avg_pool2d_grad(g, xs, pool, std::nullopt, pad).shape(), xs);
      const auto p = resolve_padding(pad, xs[2], xs[3], pool, pool);
      const Attrs a = pool_attrs({pool.h, pool.w}, {pool.h, pool.w}, Ints(p.begin(), p.end()));
      EXPECT_EQ(call_op1(get_op("max_pool2d_grad_grad"), {x, zeros(xs, dt)}, a).shape(), ys);
    }
  }
}

TEST(PoolingEdgeCases, EmptyBatchGivesEmptyOutput) {
  expect_empty_pooling({0, 3, 4, 6}, DType::f32);
  expect_empty_pooling({0, 3, 5, 5}, DType::f64);
}

TEST(PoolingEdgeCases, EmptyChannelsGiveEmptyOutput) {
  expect_empty_pooling({2, 0, 4, 6}, DType::f32);
  expect_empty_pooling({2, 0, 5, 5}, DType::f64);
  expect_empty_pooling({2, 0, 5, 5}, DType::f16);
}

// ---- empty H or W: refused, even where explicit padding would make the window fit ----
TEST(PoolingEdgeCases, EmptyHeightWithPaddingIsRefusedNotReadPastTheData) {
  const Tensor x = zeros({1, 2, 0, 4});
  // Padded 2x4: a 2x2 window fits, but every output window is padding only.
  const Padding pad(1, 1, 0, 0);
  EXPECT_EQ(error_of([&] { max_pool2d(x, 2, std::nullopt, pad); }),
            "max_pool2d: input [1, 2, 0, 4] has an empty spatial dim: every pool window (2x2, "
            "padding [1, 1, 0, 0]) would hold only padding");
  EXPECT_EQ(error_of([&] { avg_pool2d(x, 2, std::nullopt, pad); }),
            "avg_pool2d: input [1, 2, 0, 4] has an empty spatial dim: every pool window (2x2, "
            "padding [1, 1, 0, 0]) would hold only padding");
  EXPECT_EQ(error_of([&] { pool2d_output_shape({1, 2, 0, 4}, 2, std::nullopt, pad); }),
            "pool2d: input [1, 2, 0, 4] has an empty spatial dim: every pool window "
            "(2x2, padding [1, 1, 0, 0]) would hold only padding");
  EXPECT_TRUE(contains(error_of([&] {
                         max_pool2d_grad(x, zeros({1, 2, 1, 2}), 2, std::nullopt, pad);
                       }),
                       "max_pool2d_grad: input [1, 2, 0, 4] has an empty spatial dim"));
  EXPECT_TRUE(contains(error_of([&] {
                         avg_pool2d_grad(zeros({1, 2, 1, 2}), {1, 2, 0, 4}, 2, std::nullopt, pad);
                       }),
                       "avg_pool2d_grad: input [1, 2, 0, 4] has an empty spatial dim"));
  EXPECT_TRUE(contains(error_of([&] {
                         call_op1(get_op("max_pool2d_grad_grad"), {x, zeros({1, 2, 0, 4})},
                                  pool_attrs({2, 2}, {2, 2}, {1, 1, 0, 0}));
                       }),
                       "max_pool2d_grad_grad: input [1, 2, 0, 4] has an empty spatial dim"));
}

TEST(PoolingEdgeCases, EmptyWidthIsRefusedThroughTheOpsToo) {
  // The op called directly (graph mode, ONNX import) goes through the same shape rule.
  const Tensor x = zeros({2, 1, 3, 0});
  const Attrs a = pool_attrs({1, 2}, {1, 1}, {0, 0, 1, 1});
  for (const char* name : {"max_pool2d", "avg_pool2d"})
    EXPECT_EQ(error_of([&] { call_op1(get_op(name), {x}, a); }),
              std::string(name) +
                  ": input [2, 1, 3, 0] has an empty spatial dim: every pool window (1x2, "
                  "padding [0, 0, 1, 1]) would hold only padding");
  // Also without padding, and with an empty batch: H, W must not be 0 (as in PyTorch).
  EXPECT_TRUE(contains(error_of([] { max_pool2d(zeros({0, 1, 0, 3}), 1); }),
                       "max_pool2d: input [0, 1, 0, 3] has an empty spatial dim"));
  EXPECT_TRUE(contains(error_of([] { avg_pool2d(zeros({1, 1, 3, 0}), 2, Size2(1), "same"); }),
                       "avg_pool2d: input [1, 1, 3, 0] has an empty spatial dim"));
}

// ---- the most padding allowed: padding = pool - 1, so border windows hold one real element ----
// Independent reference: max ignores padding, avg divides by the real elements (TensorFlow).
Tensor naive_pool(const Tensor& x, Size2 k, Size2 s, const Ints& p, bool is_max) {
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t OH = 1 + (H + p[0] + p[1] - k.h) / s.h;
  const std::int64_t OW = 1 + (W + p[2] + p[3] - k.w) / s.w;
  std::vector<double> xv = x.to_vector<double>(), y;
  for (std::int64_t nc = 0; nc < N * C; ++nc)
    for (std::int64_t oy = 0; oy < OH; ++oy)
      for (std::int64_t ox = 0; ox < OW; ++ox) {
        double best = -std::numeric_limits<double>::infinity(), total = 0;
        int count = 0;
        for (std::int64_t i = 0; i < k.h; ++i)
          for (std::int64_t j = 0; j < k.w; ++j) {
            const std::int64_t iy = oy * s.h - p[0] + i, ix = ox * s.w - p[2] + j;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const double v = xv[std::size_t((nc * H + iy) * W + ix)];
            best = std::max(best, v);
            total += v;
            ++count;
          }
        EXPECT_GT(count, 0) << "the shape rule let through a window of padding only";
        y.push_back(is_max ? best : total / count);
      }
  return constant(y, {N, C, OH, OW});
}

TEST(PoolingEdgeCases, MaximalPaddingWindowsHoldARealElement) {
  struct Case {
    Shape x;
    Size2 k, s;
    Ints pads;
  };
  for (const Case& c : {Case{{1, 1, 1, 1}, 2, 1, {1, 1, 1, 1}}, Case{{2, 3, 1, 2}, {3, 2}, 1, {2, 2, 1, 1}},
                        Case{{1, 2, 5, 4}, 3, {2, 3}, {2, 2, 2, 2}},
                        Case{{1, 1, 2, 7}, {2, 4}, {3, 5}, {1, 1, 3, 3}}}) {
    SCOPED_TRACE("input " + shape_str(c.x) + " pads " + shape_str(Shape(c.pads)));
    const Tensor x = rand_tensor(c.x, 71);
    const Padding pad(c.pads[0], c.pads[1], c.pads[2], c.pads[3]);
    const Tensor mx = max_pool2d(x, c.k, c.s, pad), av = avg_pool2d(x, c.k, c.s, pad);
    EXPECT_TRUE(all_close(mx, naive_pool(x, c.k, c.s, c.pads, true), 1e-12));
    EXPECT_TRUE(all_close(av, naive_pool(x, c.k, c.s, c.pads, false), 1e-12));
    for (double v : mx.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
    for (double v : av.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
    // The gradients are finite and conserve the incoming gradient's sum (each g lands on one
    // real element for max, spreads over real elements only for avg).
    const Tensor g = rand_tensor(mx.shape(), 5);
    const double gs = sum(g).item<double>();
    EXPECT_NEAR(sum(max_pool2d_grad(x, g, c.k, c.s, pad)).item<double>(), gs, 1e-9);
    EXPECT_NEAR(sum(avg_pool2d_grad(g, c.x, c.k, c.s, pad)).item<double>(), gs, 1e-9);
  }
  // One step more padding is refused: a window could then be padding only.
  EXPECT_EQ(error_of([] { max_pool2d(zeros({1, 1, 1, 1}), 2, Size2(1), Padding(2, 0, 0, 0)); }),
            "max_pool2d: padding [2, 0, 0, 0] must be smaller than the pool size [2, 2]");
}

// Every configuration the shape rule accepts (small H, pool, stride, padding; W likewise by
// symmetry) has a real input row in each output window: the invariant the kernels rely on.
TEST(PoolingEdgeCases, EveryAcceptedWindowOverlapsTheInput) {
  int accepted = 0;
  for (std::int64_t h = 0; h <= 4; ++h)
    for (std::int64_t k = 1; k <= 4; ++k)
      for (std::int64_t s = 1; s <= 3; ++s)
        for (std::int64_t pt = 0; pt <= k; ++pt)
          for (std::int64_t pb = 0; pb <= k; ++pb) {
            Shape y;
            try {
              y = pool2d_output_shape({1, 1, h, 1}, {k, 1}, Size2{s, 1}, Padding(pt, pb, 0, 0));
            } catch (const Error&) {
              continue;
            }
            ++accepted;
            EXPECT_GE(h, 1);
            EXPECT_LT(pt, k);
            EXPECT_LT(pb, k);
            for (std::int64_t oy = 0; oy < y[2]; ++oy) {
              const std::int64_t y0 = oy * s - pt;
              EXPECT_TRUE(y0 < h && y0 + k > 0)
                  << "h " << h << " k " << k << " s " << s << " pads " << pt << "," << pb
                  << ": window " << oy << " is padding only";
            }
          }
  EXPECT_GT(accepted, 100);
}

}  // namespace
}  // namespace soma
