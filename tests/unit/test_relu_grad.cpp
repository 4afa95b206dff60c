// relu's gradient as one op, `relu_grad(x, g)` = 0 where x <= 0, else g (so g passes where x is
// NaN, as PyTorch's threshold_backward; issue 19). Issue 5: it replaced a greater + zeros_like +
// where composition. Checked against a naive loop, against the composition bit for bit, through
// first and second derivatives, in graph mode, and for errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>


#include "soma/soma.hpp"
#include "fast_paths_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::noncontiguous;
using testing::rand_tensor;

Tensor relu_grad_call(const Tensor& x, const Tensor& g) {
  return call_op1(get_op("relu_grad"), {x, g});
}

using testing::same_bits;

TEST(ReluGrad, MatchesANaiveLoopForEveryFloatingDtype) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = rand_tensor({5, 37}, 1, -1.0, 1.0, dt), g = rand_tensor({5, 37}, 2, -3.0, 3.0, dt);
    const Tensor out = relu_grad_call(x, g);
    ASSERT_EQ(out.dtype(), dt);
    const Tensor x64 = cast(x, DType::f64), g64 = cast(g, DType::f64);
    std::vector<double> want(std::size_t(x.numel()));
    for (std::int64_t i = 0; i < x.numel(); ++i)
      want[std::size_t(i)] = x64.data<double>()[i] <= 0 ? 0.0 : g64.data<double>()[i];
    EXPECT_TRUE(all_close(cast(out, DType::f64), want, 0, 0)) << dtype_name(dt);
  }
}

TEST(ReluGrad, IsBitIdenticalToTheWhereCompositionIncludingNaNsAndZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // x: positives, zeros of both signs, negatives, NaN, infinities; g: NaN/inf where x masks it.
  const Tensor x = constant<float>({1.0f, 0.0f, -0.0f, -2.0f, nan, inf, -inf, 3.0f, 1e-30f, -1e-30f});
  const Tensor g = constant<float>({-1.5f, nan, inf, nan, 7.0f, -0.0f, 2.0f, nan, -0.0f, -4.0f});
  const Tensor got = relu_grad_call(x, g);
  const Tensor old = where(x <= 0.0, zeros_like(g), g);
  EXPECT_TRUE(same_bits(got, old));
  const std::vector<float> v = got.to_vector<float>();
  EXPECT_EQ(v[0], -1.5f);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_FALSE(std::signbit(v[1]));   // masked: +0 even where g is NaN
  EXPECT_FALSE(std::signbit(v[3]));   // masked NaN in g
  EXPECT_EQ(v[4], 7.0f);              // x NaN: g passes (PyTorch's threshold_backward)
  EXPECT_TRUE(std::signbit(v[5]));    // passes g = -0 through
  EXPECT_TRUE(std::isnan(v[7]));      // x > 0 passes g's NaN
  // Large, odd-sized, non-contiguous and broadcast operands through the strided loop too.
  const Tensor xb = rand_tensor({3, 1031}, 3, -1.0, 1.0, DType::f32), gb = rand_tensor({3, 1031}, 4, -1.0, 1.0, DType::f32);
  EXPECT_TRUE(same_bits(relu_grad_call(xb, gb), where(xb <= 0.0, zeros_like(gb), gb)));
  const Tensor xn = noncontiguous(xb), gn = noncontiguous(gb);
  EXPECT_TRUE(same_bits(relu_grad_call(xn, gn), where(xn <= 0.0, zeros_like(gn), gn)));
  EXPECT_TRUE(same_bits(relu_grad_call(xb.transpose(), gb.transpose()),
                        where(xb.transpose() <= 0.0, zeros_like(gb.transpose()), gb.transpose())));
}

TEST(ReluGrad, ReluBackwardUsesItAndMatchesFiniteDifferences) {
  const Tensor x = rand_tensor({4, 6}, 5);
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& in) { return relu(in[0]); }, {x}));
  // Composed: the mask selects the upstream gradient of a later op.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return square(relu(in[0] * in[1])) * 0.5; },
      {x, rand_tensor({4, 6}, 6)}));
  // The gradient is the op's result (checked against the formula with an f32 input).
  const Tensor xf = rand_tensor({2, 9}, 7, -1.0, 1.0, DType::f32);
  const Tensor w = rand_tensor({2, 9}, 8, -1.0, 1.0, DType::f32);
  GradientTape tape;
  tape.watch(xf);
  const Tensor dx = tape.gradient(sum(relu(xf) * w), xf);
  EXPECT_TRUE(same_bits(dx, where(xf > 0.0, w, zeros_like(w))));
}

TEST(ReluGrad, SecondOrderGradientsFlowThroughTheUpstreamGradientOnly) {
  // d/dx of (d/dx sum(relu(x) * x)) : first derivative = relu'(x) * x + relu(x), second
  // derivative = 2 relu'(x) away from 0 (relu'' = 0), computed with nested tapes.
  const Tensor x = rand_tensor({3, 5}, 9);
  GradientTape outer;
  outer.watch(x);
  Tensor first;
  {
    GradientTape inner;
    inner.watch(x);
    first = inner.gradient(sum(relu(x) * x), x);
  }
  const Tensor second = outer.gradient(sum(first), x);
  const Tensor want = where(x > 0.0, full_like(x, 2.0), zeros_like(x));
  EXPECT_TRUE(all_close(second, want, 1e-12, 0));
  // relu_grad(x, g) differentiated in g: finite differences over g (x held fixed).
  const Tensor g = rand_tensor({3, 5}, 10);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return relu_grad_call(x, in[0]); },
                              {g}));
}

TEST(ReluGrad, GraphModeGradientRunsTheOpAndAgreesWithEager) {
  const Tensor x = rand_tensor({8, 16}, 11, -1.0, 1.0, DType::f32);
  auto grad_of = [](const std::vector<Tensor>& in) {
    GradientTape tape;
    tape.watch(in[0]);
    return std::vector<Tensor>{tape.gradient(sum(square(relu(in[0]))), in[0])};
  };
  Function f = function(grad_of);
  const Tensor want = grad_of({x})[0];
  for (int call = 0; call < 2; ++call) EXPECT_TRUE(same_bits(f({x})[0], want)) << "call " << call;
  const std::string dot = f.graph_for({x}).to_dot();
  EXPECT_NE(dot.find("relu_grad"), std::string::npos) << "the traced gradient does not use relu_grad";
  EXPECT_EQ(dot.find("where"), std::string::npos) << dot;
}

TEST(ReluGrad, MismatchedOperandsAreClearErrors) {
  try {
    relu_grad_call(rand_tensor({2, 3}, 1, -1, 1, DType::f32), rand_tensor({2, 3}, 2, -1, 1, DType::f64));
    FAIL() << "mixed dtypes did not throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("relu_grad"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
  }
  try {
    relu_grad_call(rand_tensor({2, 3}, 1), rand_tensor({4, 3}, 2));
    FAIL() << "mismatched shapes did not throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("relu_grad"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace soma
