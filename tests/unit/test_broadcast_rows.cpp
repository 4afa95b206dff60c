// Broadcasting binary ops: the row loops for unit-stride rows and for an operand repeated along
// the row (a conv bias [C, 1, 1] over [N, C, H, W], a Dense bias over the batch) against the
// general strided loop (fast paths off) and a naive reference (issue 5).
#include <cstring>
#include <limits>
#include <string>

#include "fast_paths_testing.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::rand_tensor;

using testing::same_bits;

template <class F>
void expect_same_as_generic(F f, const Tensor& a, const Tensor& b, const char* what) {
  const auto [fast, slow] = testing::fast_and_generic([&] { return f(a, b); });
  EXPECT_TRUE(same_bits(fast, slow)) << what;
}

TEST(BroadcastRows, PerChannelBiasMatchesANaiveLoop) {
  const Tensor x = rand_tensor({3, 5, 7, 9}, 1, -1, 1, DType::f32);
  const Tensor b = rand_tensor({5, 1, 1}, 2, -1, 1, DType::f32);
  const Tensor y = x + b;
  const Tensor x64 = cast(x, DType::f64), b64 = cast(b, DType::f64);
  std::vector<double> want(std::size_t(x.numel()));
  for (std::int64_t i = 0; i < x.numel(); ++i)
    want[std::size_t(i)] = double(float(x64.data<double>()[i] + b64.data<double>()[(i / 63) % 5]));
  EXPECT_TRUE(all_close(cast(y, DType::f64), want, 0, 0));
}

TEST(BroadcastRows, EveryRowShapeIsBitIdenticalToTheGeneralLoop) {
  const Tensor x4 = rand_tensor({4, 6, 5, 33}, 3, -2, 2, DType::f32);
  const Tensor c = rand_tensor({6, 1, 1}, 4, -2, 2, DType::f32);
  const Tensor row = rand_tensor({33}, 5, -2, 2, DType::f32);
  const Tensor col = rand_tensor({4, 6, 5, 1}, 6, -2, 2, DType::f32);
  auto add_ = [](const Tensor& a, const Tensor& b) { return a + b; };
  auto sub_ = [](const Tensor& a, const Tensor& b) { return a - b; };
  auto div_ = [](const Tensor& a, const Tensor& b) { return a / b; };
  auto max_ = [](const Tensor& a, const Tensor& b) { return maximum(a, b); };
  auto gt_ = [](const Tensor& a, const Tensor& b) { return a > b; };
  // Repeated operand on either side, each op; rows of unit stride in both; a column operand
  // (stride 0 along the row on one side); a transposed (non-unit) row stays general.
  expect_same_as_generic(add_, x4, c, "x + c");
  expect_same_as_generic(add_, c, x4, "c + x");
  expect_same_as_generic(sub_, c, x4, "c - x");
  expect_same_as_generic(div_, x4, c, "x / c");
  expect_same_as_generic(max_, c, x4, "maximum(c, x)");
  expect_same_as_generic(gt_, x4, c, "x > c");
  expect_same_as_generic(add_, x4, row, "x + row");
  expect_same_as_generic(sub_, row, x4, "row - x");
  expect_same_as_generic(add_, x4, col, "x + col");
  expect_same_as_generic(sub_, col, x4, "col - x");
  expect_same_as_generic(add_, x4.transpose(), rand_tensor({6, 1}, 7, -1, 1, DType::f32), "xT + c");
  // f64, f16, bf16 and integers through the same loops.
  for (DType dt : {DType::f64, DType::f16, DType::bf16, DType::i32}) {
    const Tensor a = cast(x4 * 8.0, dt), b = cast(c * 8.0, dt);
    expect_same_as_generic(add_, a, b, dtype_name(dt));
    expect_same_as_generic(sub_, b, a, dtype_name(dt));
  }
  // NaN and infinities in the repeated operand and the rows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor special = constant<float>({nan, 1.0f, -std::numeric_limits<float>::infinity()});
  expect_same_as_generic(max_, reshape(special, {3, 1}), rand_tensor({3, 40}, 8, -1, 1, DType::f32),
                         "maximum with NaN");
}

TEST(BroadcastRows, RepeatedOperandGradientIsTheReducedSum) {
  // The bias gradient flows through sum_to: checked in f64 against finite differences.
  EXPECT_TRUE(testing::check_gradients(
      [](const std::vector<Tensor>& in) { return in[0] * (in[0] + in[1]); },
      {rand_tensor({2, 3, 4, 5}, 9), rand_tensor({3, 1, 1}, 10)}));
}

TEST(BroadcastRows, MismatchedShapesAreStillClearErrors) {
  try {
    (void)(rand_tensor({2, 3, 4, 5}, 1) + rand_tensor({4, 1, 1}, 2));
    FAIL() << "[2, 3, 4, 5] + [4, 1, 1] did not throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3, 4, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 1, 1]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace soma
