// Pooling variants: avg_pool2d with count_include_pad, max_pool2d_with_indices and max_unpool2d
// (values by hand, gradients vs finite differences, errors), and PyTorch's AvgPool2d,
// max_pool2d(return_indices=True) and max_unpool2d on the same inputs (python3-torch, when
// present). conv3d against a naive loop, finite differences and PyTorch's conv3d.
#include <string>

#include "error_testing.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

Tensor iota(const Shape& s) {
  std::vector<double> v(std::size_t(numel(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i + 1);
  return constant(v, s);
}

TEST(AvgPoolCountIncludePad, DividesByTheWholeWindow) {
  // 1..9 in 3x3, 2x2 windows, stride 2, one row/column of padding before: windows
  // {1}, {2,3} / {4,7}, {5,6,8,9}.
  const Tensor x = iota({1, 1, 3, 3});
  const Padding pad(1, 0, 1, 0);
  EXPECT_TRUE(all_close(avg_pool2d(x, 2, 2, pad), {1.0, 2.5, 5.5, 7.0}, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(avg_pool2d(x, 2, 2, pad, true), {0.25, 1.25, 2.75, 7.0}, 1e-12, 1e-12));
  // Without padding both modes agree.
  const Tensor y = rand_tensor({2, 3, 6, 5}, 1);
  EXPECT_TRUE(all_close(avg_pool2d(y, {3, 2}, 1, "valid", true), avg_pool2d(y, {3, 2}, 1),
                        1e-12, 1e-12));
}

TEST(AvgPoolCountIncludePad, GradientsMatchFiniteDifferences) {
  const Tensor x = rand_tensor({2, 2, 5, 4}, 2);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d(in[0], {3, 2}, Size2(2, 1), Padding(1, 1, 1, 0), true);
      },
      {x}));
  // avg_pool2d_grad is avg_pool2d's adjoint in this mode too: <pool(x), g> == <x, pool^T(g)>.
  const Tensor y = avg_pool2d(x, 3, 2, "same", true);
  const Tensor g = rand_tensor(y.shape(), 3);
  const Tensor dx = avg_pool2d_grad(g, x.shape(), 3, 2, "same", true);
  EXPECT_NEAR(sum(y * g).item<double>(), sum(x * dx).item<double>(), 1e-12);
}

TEST(MaxPoolWithIndices, ValuesAndPlaneOffsets) {
  // 4x4 plane of 1..16 (larger to the bottom right), 2x2 windows: maxima at (1,1), (1,3), ...
  const Tensor x = iota({1, 2, 4, 4});
  auto [y, idx] = max_pool2d_with_indices(x, 2);
  EXPECT_EQ(idx.dtype(), DType::i64);
  EXPECT_TRUE(all_close(y, max_pool2d(x, 2), 0, 0));
  EXPECT_EQ(idx.to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 7, 13, 15, 5, 7, 13, 15}));
  // Ties: the first maximum in row-major order (as the gradient of max_pool2d).
  const Tensor t = constant(std::vector<double>{3, 3, 3, 1}, {1, 1, 2, 2});
  EXPECT_EQ(max_pool2d_with_indices(t, 2).second.to_vector<std::int64_t>(),
            std::vector<std::int64_t>{0});
  // Padding: offsets stay within the unpadded plane.
  const Tensor z = rand_tensor({2, 3, 5, 5}, 4);
  auto [zy, zi] = max_pool2d_with_indices(z, 3, 2, "same");
  const auto iv = zi.to_vector<std::int64_t>();
  for (auto v : iv) EXPECT_TRUE(v >= 0 && v < 25) << v;
}

TEST(MaxPoolWithIndices, GradientScattersToTheArgmax) {
  const Tensor x = rand_tensor({2, 2, 5, 5}, 5);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return max_pool2d_with_indices(in[0], 3, 2, Padding(1, 1, 1, 1)).first;
      },
      {x}));
}

TEST(MaxUnpool, InvertsMaxPoolWhereTheMaximaWere) {
  const Tensor x = rand_tensor({2, 3, 4, 6}, 6, 0.1, 1.0);  // positive: the zeros lose
  auto [y, idx] = max_pool2d_with_indices(x, 2);
  const Tensor u = max_unpool2d(y, idx, Shape{4, 6});
  ASSERT_EQ(u.shape(), x.shape());
  // u is x at each window's maximum and zero elsewhere: pooling it again gives y back, and
  // its nonzero count is one per window.
  EXPECT_TRUE(all_close(max_pool2d(u, 2), y, 0, 0));
  EXPECT_EQ(sum(cast(not_equal(u, zeros_like(u)), DType::f64)).item<double>(), double(y.numel()));
  EXPECT_TRUE(all_close(u * cast(not_equal(u, zeros_like(u)), DType::f64),
                        x * cast(not_equal(u, zeros_like(u)), DType::f64), 0, 0));
  // Full [N, C, H, W] output size, and a larger plane than the pooled input's (odd size).
  EXPECT_EQ(max_unpool2d(y, idx, Shape{2, 3, 5, 7}).shape(), Shape({2, 3, 5, 7}));
}

TEST(MaxUnpool, GradientGathersAtTheIndices) {
  const Tensor x = rand_tensor({2, 2, 5, 4}, 7);
  const auto pooled = max_pool2d_with_indices(x, 2);
  const Tensor idx = pooled.second;  // a plain variable: clang 14 captures no bindings
  EXPECT_TRUE(check_gradients(
      [idx](const std::vector<Tensor>& in) { return max_unpool2d(in[0], idx, Shape{5, 4}); },
      {pooled.first}));
  // Through both: the gradient of unpool(pool(x)) is 1 at each window's maximum.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        auto [p, i] = max_pool2d_with_indices(in[0], 2);
        return max_unpool2d(p, i, Shape{5, 4});
      },
      {x}));
}

TEST(MaxUnpool, RefusesBadIndicesAndSizes) {
  const Tensor x = rand_tensor({1, 1, 2, 2}, 8);
  const Tensor idx = constant(std::vector<std::int64_t>{0, 3, 5, 16}, {1, 1, 2, 2});
  EXPECT_THROW(max_unpool2d(x, idx, Shape{4, 4}), Error);  // 16 is outside a 4x4 plane
  EXPECT_THROW(max_unpool2d(x, cast(idx, DType::f64), Shape{4, 4}), Error);
  EXPECT_THROW(max_unpool2d(x, idx, Shape{2, 1, 4, 4}), Error);  // N differs
  EXPECT_THROW(max_unpool2d(x, reshape(idx, {1, 1, 4, 1}), Shape{4, 4}), Error);
  EXPECT_EQ(max_unpool2d(x, constant(std::vector<std::int64_t>{0, 3, 5, 15}, {1, 1, 2, 2}),
                         Shape{4, 4})
                .shape(),
            Shape({1, 1, 4, 4}));
}

// PyTorch's AvgPool2d (both count_include_pad modes), max_pool2d(return_indices=True) and
// max_unpool2d on the same input.
TEST(PoolVariants, MatchPyTorch) {
  const char* script = R"PY(
import sys
try:
    import torch
    import torch.nn.functional as F
except Exception:
    sys.exit(77)
torch.manual_seed(3)
out = open(sys.argv[1], 'w')
def w(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(name + " " + str(t.dim()) + " " + " ".join(str(d) for d in t.shape) + " " +
              " ".join(repr(float(v)) for v in t.flatten()) + "\n")
x = torch.rand(2, 3, 7, 6, dtype=torch.float64)
w("x", x)
w("avg_pad", F.avg_pool2d(x, (3, 2), stride=(2, 2), padding=(1, 1), count_include_pad=True))
w("avg_nopad", F.avg_pool2d(x, (3, 2), stride=(2, 2), padding=(1, 1), count_include_pad=False))
y, i = F.max_pool2d(x, (3, 3), stride=(2, 1), padding=(1, 1), return_indices=True)
w("max", y); w("idx", i)
y2, i2 = F.max_pool2d(x, 2, return_indices=True)
w("unpool", F.max_unpool2d(y2, i2, 2, output_size=(7, 6)))
)PY";
  auto run = soma::testing::run_torch_script(script, "pool_variants");
  if (run.unavailable()) GTEST_SKIP() << "no python3 with torch: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  auto& t = run.t;
  const Tensor x = t["x"];
  const Padding p11(1, 1, 1, 1);
  EXPECT_TRUE(all_close(avg_pool2d(x, {3, 2}, 2, p11, true), t["avg_pad"], 1e-12, 1e-12));
  EXPECT_TRUE(all_close(avg_pool2d(x, {3, 2}, 2, p11, false), t["avg_nopad"], 1e-12, 1e-12));
  auto [y, idx] = max_pool2d_with_indices(x, 3, Size2(2, 1), p11);
  EXPECT_TRUE(all_close(y, t["max"], 0, 0));
  EXPECT_TRUE(all_close(cast(idx, DType::f64), t["idx"], 0, 0));
  auto [y2, i2] = max_pool2d_with_indices(x, 2);
  EXPECT_TRUE(all_close(max_unpool2d(y2, i2, Shape{7, 6}), t["unpool"], 0, 0));
}

// x [N, C, D, H, W], w [O, C/g, KD, KH, KW], pads {front, back, top, bottom, left, right}.
Tensor naive_conv3d(const Tensor& x, const Tensor& w, std::array<std::int64_t, 3> s,
                    std::array<std::int64_t, 6> p, std::array<std::int64_t, 3> dl,
                    std::int64_t groups) {
  const Shape xs = x.shape(), ws = w.shape();
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::int64_t N = xs[0], C = xs[1], O = ws[0], cg = C / groups, og = O / groups;
  std::int64_t out[3];
  for (int a = 0; a < 3; ++a)
    out[a] = 1 + (xs[2 + a] + p[2 * a] + p[2 * a + 1] - dl[a] * (ws[2 + a] - 1) - 1) / s[a];
  const Shape ys{N, O, out[0], out[1], out[2]};
  std::vector<double> y(std::size_t(numel(ys)), 0.0);
  for (std::int64_t i = 0; i < numel(ys); ++i) {
    const auto yi = soma::testing::unravel(i, ys);
    const std::int64_t n = yi[0], o = yi[1], grp = o / og;
    double acc = 0;
    for (std::int64_t ci = 0; ci < cg; ++ci)
      for (std::int64_t a = 0; a < ws[2]; ++a)
        for (std::int64_t b = 0; b < ws[3]; ++b)
          for (std::int64_t k = 0; k < ws[4]; ++k) {
            const std::int64_t z = yi[2] * s[0] - p[0] + a * dl[0];
            const std::int64_t r = yi[3] * s[1] - p[2] + b * dl[1];
            const std::int64_t q = yi[4] * s[2] - p[4] + k * dl[2];
            if (z < 0 || z >= xs[2] || r < 0 || r >= xs[3] || q < 0 || q >= xs[4]) continue;
            acc += xv[std::size_t(soma::testing::ravel({n, grp * cg + ci, z, r, q}, xs))] *
                   wv[std::size_t(soma::testing::ravel({o, ci, a, b, k}, ws))];
          }
    y[std::size_t(i)] = acc;
  }
  return constant(y, ys);
}

TEST(Conv3d, MatchesANaiveLoop) {
  struct Case {
    Shape x, w;
    std::array<std::int64_t, 3> s;
    std::array<std::int64_t, 6> p;
    std::array<std::int64_t, 3> d;
    std::int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5, 5}, {4, 3, 2, 3, 3}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}, {1, 1, 1}, 1},
      {{1, 4, 7, 6, 5}, {6, 2, 3, 2, 3}, {2, 1, 2}, {1, 2, 0, 1, 1, 1}, {2, 1, 1}, 2},
      {{2, 2, 5, 4, 4}, {2, 1, 3, 3, 1}, {3, 2, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 2}, 2},
  };
  for (const Case& k : cases) {
    const Tensor x = rand_tensor(k.x, 11), w = rand_tensor(k.w, 12);
    EXPECT_TRUE(all_close(conv3d(x, w, k.s, k.p, k.d, k.groups),
                          naive_conv3d(x, w, k.s, k.p, k.d, k.groups), 1e-12, 1e-12))
        << shape_str(k.x) << " " << shape_str(k.w);
  }
  EXPECT_THROW(conv3d(rand_tensor({1, 2, 4, 4}, 1), rand_tensor({1, 2, 1, 1, 1}, 2)), Error);
  EXPECT_THROW(conv3d(rand_tensor({1, 2, 2, 4, 4}, 1), rand_tensor({1, 2, 3, 1, 1}, 2)), Error);
  EXPECT_THROW(conv3d(rand_tensor({1, 2, 2, 4, 4}, 1), rand_tensor({1, 3, 1, 1, 1}, 2)), Error);
}

TEST(Conv3d, GradientsMatchFiniteDifferences) {
  const Tensor x = rand_tensor({1, 2, 4, 4, 3}, 13), w = rand_tensor({2, 2, 2, 2, 2}, 14);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return conv3d(in[0], in[1], {2, 1, 1}, {1, 0, 0, 1, 1, 0}, {1, 1, 1}, 1);
      },
      {x, w}));
}

TEST(Conv3d, MatchesPyTorch) {
  const char* script = R"PY(
import sys
try:
    import torch
    import torch.nn.functional as F
except Exception:
    sys.exit(77)
torch.manual_seed(4)
out = open(sys.argv[1], 'w')
def w(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(name + " " + str(t.dim()) + " " + " ".join(str(d) for d in t.shape) + " " +
              " ".join(repr(float(v)) for v in t.flatten()) + "\n")
x = torch.rand(2, 4, 6, 5, 7, dtype=torch.float64)
k = torch.rand(6, 2, 3, 2, 3, dtype=torch.float64)
w("x", x); w("w", k)
w("y", F.conv3d(x, k, stride=(2, 1, 2), padding=(1, 1, 1), dilation=(1, 2, 1), groups=2))
)PY";
  auto run = soma::testing::run_torch_script(script, "conv3d");
  if (run.unavailable()) GTEST_SKIP() << "no python3 with torch: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  auto& t = run.t;
  EXPECT_TRUE(all_close(conv3d(t["x"], t["w"], {2, 1, 2}, {1, 1, 1, 1, 1, 1}, {1, 2, 1}, 2),
                        t["y"], 1e-12, 1e-12));
}

}  // namespace
