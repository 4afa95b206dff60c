// Pooling variants: avg_pool2d with count_include_pad, max_pool2d_with_indices and max_unpool2d
// (values by hand, gradients vs finite differences, errors), and PyTorch's AvgPool2d,
// max_pool2d(return_indices=True) and max_unpool2d on the same inputs (python3-torch, when
// present).
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
  auto [y, idx] = max_pool2d_with_indices(x, 2);
  EXPECT_TRUE(check_gradients(
      [idx = idx](const std::vector<Tensor>& in) { return max_unpool2d(in[0], idx, Shape{5, 4}); },
      {y}));
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

}  // namespace
