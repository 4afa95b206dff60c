// GradientTape: recording, persistence, watching, variables, stop_gradient, no-grad scopes and
// nested tapes for higher derivatives.
#include <cmath>

#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

TEST(GradientTape, PersistentTapeAnswersSeveralQuestions) {
  Tensor x = constant(3.0f);
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = x * x;
  Tensor z = y * y;
  EXPECT_FLOAT_EQ(tape.gradient(z, x).item<float>(), 108.0f);
  EXPECT_FLOAT_EQ(tape.gradient(y, x).item<float>(), 6.0f);
  EXPECT_FLOAT_EQ(tape.gradient(z, y).item<float>(), 18.0f);
}

TEST(GradientTape, NonPersistentTapeRefusesASecondQuestion) {
  Tensor x = constant(3.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x;
  EXPECT_DOUBLE_EQ(tape.gradient(y, x).item<double>(), 6.0);
  try {
    tape.gradient(y, x);
    FAIL() << "second gradient() on a non-persistent tape did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GradientTape.gradient"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("persistent"), std::string::npos);
  }
}

TEST(GradientTape, UnwatchedTensorsGetNoGradient) {
  Tensor x = constant(2.0), w = constant(5.0);
  GradientTape tape(true);
  tape.watch(x);
  Tensor y = x * w;
  EXPECT_DOUBLE_EQ(tape.gradient(y, x).item<double>(), 5.0);
  EXPECT_FALSE(tape.gradient(y, w).defined());
  EXPECT_DOUBLE_EQ(tape.gradient(y, w, UnconnectedGradients::Zero).item<double>(), 0.0);
}

TEST(GradientTape, UnconnectedSourceIsUndefinedOrZero) {
  Tensor x = constant({1.0, 2.0}), u = constant({3.0});
  GradientTape tape(true);
  tape.watch(std::vector<Tensor>{x, u});
  Tensor y = x * 2.0;
  EXPECT_FALSE(tape.gradient(y, u).defined());
  EXPECT_TRUE(all_close(tape.gradient(y, u, UnconnectedGradients::Zero), {0.0}));
}

TEST(GradientTape, GradientsAccumulateOverEveryUse) {
  Tensor x = constant(2.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x + x * 3.0 + x;  // dy/dx = 2x + 4 = 8
  EXPECT_DOUBLE_EQ(tape.gradient(y, x).item<double>(), 8.0);
}

TEST(GradientTape, ListOfSources) {
  Tensor a = constant(2.0), b = constant(3.0);
  GradientTape tape;
  tape.watch(std::vector<Tensor>{a, b});
  Tensor y = a * a * b;
  auto g = tape.gradient(y, std::vector<Tensor>{a, b});
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 12.0);
  EXPECT_DOUBLE_EQ(g[1].item<double>(), 4.0);
}

TEST(GradientTape, OutputGradientSeedsTheBackwardPass) {
  Tensor x = constant({1.0, 2.0, 3.0});
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x;
  Tensor g = tape.gradient(y, x, UnconnectedGradients::None, constant({1.0, 0.0, 2.0}));
  EXPECT_TRUE(all_close(g, {2.0, 0.0, 12.0}));
}

TEST(GradientTape, NonScalarTargetUsesOnesAsSeed) {
  Tensor x = constant({1.0, 2.0});
  GradientTape tape;
  tape.watch(x);
  EXPECT_TRUE(all_close(tape.gradient(x * x, x), {2.0, 4.0}));
}

TEST(GradientTape, TargetThatIsTheSourceHasGradientOne) {
  Tensor x = constant({1.0, 2.0});
  GradientTape tape;
  tape.watch(x);
  EXPECT_TRUE(all_close(tape.gradient(x, x), {1.0, 1.0}));
}

TEST(GradientTape, IntegerTargetIsAnError) {
  Tensor x = constant({1, 2});
  GradientTape tape;
  tape.watch(x);
  EXPECT_THROW(tape.gradient(x + x, x), Error);
}

TEST(GradientTape, RecordsOnlyOpsThatTouchWatchedTensors) {
  Tensor x = constant(1.0), c = constant(2.0);
  GradientTape tape;
  Tensor unrelated = c * c;
  EXPECT_EQ(tape.num_recorded(), 0u);
  tape.watch(x);
  Tensor y = x * c;
  EXPECT_EQ(tape.num_recorded(), 1u);
  (void)unrelated;
  (void)y;
}

TEST(GradientTape, StopGradientBlocksFlow) {
  Tensor x = constant(3.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * stop_gradient(x);  // d/dx = stop(x) = 3
  EXPECT_DOUBLE_EQ(tape.gradient(y, x).item<double>(), 3.0);
}

TEST(GradientTape, NoGradScopeRecordsNothing) {
  Tensor x = constant(3.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y;
  {
    NoGradScope no_grad;
    y = x * x;
  }
  EXPECT_EQ(tape.num_recorded(), 0u);
  EXPECT_FALSE(tape.gradient(y, x).defined());
}

TEST(GradientTape, StopRecordingPausesOneTape) {
  Tensor x = constant(3.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y;
  {
    auto pause = tape.stop_recording();
    y = x * x;
  }
  Tensor z = x * 2.0;
  EXPECT_EQ(tape.num_recorded(), 1u);
  (void)y;
  (void)z;
}

TEST(GradientTape, NestedTapesGiveSecondDerivatives) {
  Tensor x = constant(2.0);
  GradientTape outer;
  outer.watch(x);
  Tensor dy;
  {
    GradientTape inner;
    inner.watch(x);
    Tensor y = x * x * x;        // y' = 3x^2 = 12, y'' = 6x = 12
    dy = inner.gradient(y, x);
  }
  EXPECT_DOUBLE_EQ(dy.item<double>(), 12.0);
  EXPECT_DOUBLE_EQ(outer.gradient(dy, x).item<double>(), 12.0);
}

TEST(GradientTape, ThirdDerivativeThroughThreeTapes) {
  Tensor x = constant(0.5);
  GradientTape t3;
  t3.watch(x);
  GradientTape t2;
  t2.watch(x);
  GradientTape t1;
  t1.watch(x);
  Tensor y = sin(x);
  Tensor d1 = t1.gradient(y, x);
  Tensor d2 = t2.gradient(d1, x);
  Tensor d3 = t3.gradient(d2, x);
  EXPECT_NEAR(d1.item<double>(), std::cos(0.5), 1e-12);
  EXPECT_NEAR(d2.item<double>(), -std::sin(0.5), 1e-12);
  EXPECT_NEAR(d3.item<double>(), -std::cos(0.5), 1e-12);
}

TEST(GradientTape, SecondDerivativesOfCompositesMatchFiniteDifferences) {
  // d/dx of (d/dx f) checked numerically: f = tanh(x) * exp(x) / (1 + x^2)
  auto first = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    GradientTape t;
    t.watch(x);
    Tensor f = tanh(x) * exp(x) / (1.0 + x * x);
    return t.gradient(f, x);
  };
  EXPECT_TRUE(check_gradients(first, {rand_tensor({5}, 9)}, 1e-5, 1e-5));
}

TEST(GradientTape, GradientThroughViews) {
  auto f = [](const std::vector<Tensor>& in) {
    Tensor t = in[0].transpose().slice(0, 1, std::nullopt).reshape({-1});
    return t * t;
  };
  EXPECT_TRUE(check_gradients(f, {rand_tensor({3, 4}, 1)}));
}

TEST(GradientTape, TapeIsInactiveAfterDestruction) {
  Tensor x = constant(1.0);
  {
    GradientTape tape;
    tape.watch(x);
  }
  EXPECT_TRUE(active_tapes().empty());
}

// ---- variables --------------------------------------------------------------------------------

TEST(Variable, TrainableVariablesAreWatchedAutomatically) {
  Variable w(constant({1.0, 2.0}), "w");
  Tensor x = constant({3.0, 4.0});
  GradientTape tape;
  Tensor y = w * x;
  EXPECT_TRUE(all_close(tape.gradient(y, w), {3.0, 4.0}));
}

TEST(Variable, NonTrainableVariablesAreNotWatched) {
  Variable w(constant({1.0}), "frozen", /*trainable=*/false);
  GradientTape tape;
  Tensor y = w * 2.0;
  EXPECT_FALSE(tape.gradient(y, w).defined());
}

TEST(Variable, WatchAccessedVariablesCanBeSwitchedOff) {
  Variable w(constant({1.0}), "w");
  GradientTape tape(TapeOptions{.watch_accessed_variables = false});
  Tensor y = w * 2.0;
  EXPECT_FALSE(tape.gradient(y, w).defined());
}

TEST(Variable, AssignWritesInPlaceAndKeepsIdentity) {
  Variable v(zeros({2, 2}), "v");
  const void* before = v.value().raw_data();
  v.assign(ones({2, 2}));
  EXPECT_EQ(v.value().raw_data(), before);
  EXPECT_TRUE(all_close(v.value(), {1, 1, 1, 1}));
  v.assign_add(constant({{1.0f, 2.0f}, {3.0f, 4.0f}}));
  EXPECT_TRUE(all_close(v.value(), {2, 3, 4, 5}));
  v.assign_sub(constant(1.0f));  // broadcasts
  EXPECT_TRUE(all_close(v.value(), {1, 2, 3, 4}));
  EXPECT_EQ(v.name(), "v");
  EXPECT_EQ(v.dtype(), DType::f32);
}

TEST(Variable, InitialValueIsCopied) {
  Tensor init = constant({1.0, 2.0});
  Variable v(init);
  v.assign(constant({5.0, 6.0}));
  EXPECT_TRUE(all_close(init, {1.0, 2.0}));
}

TEST(Variable, AssignWithWrongShapeNamesVariableAndShapes) {
  Variable v(zeros({2, 3}), "kernel");
  try {
    v.assign(zeros({3, 2}));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Variable.assign"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
}

TEST(Variable, ModifiedAfterRecordingIsDetected) {
  Variable w(constant({2.0}), "w");
  GradientTape tape;
  Tensor y = w * w;
  w.assign(constant({5.0}));
  try {
    tape.gradient(y, w);
    FAIL() << "gradient after an in-place assign did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

TEST(Variable, GradientDescentStepReducesLoss) {
  Variable w(constant({0.0}), "w");
  Tensor target = constant({3.0});
  double prev = 1e9;
  for (int i = 0; i < 20; ++i) {
    GradientTape tape;
    Tensor loss = square(w - target);
    Tensor g = tape.gradient(loss, w);
    double l = loss.item<double>();
    EXPECT_LT(l, prev);
    prev = l;
    w.assign_sub(g * 0.1);
  }
  EXPECT_NEAR(w.value().item<double>(), 3.0, 0.1);
}

// ---- gradients nobody asked for are not computed (GradContext::needs) ----

namespace {
std::vector<std::uint64_t> g_probe_masks;  // needs_mask seen by each call of the probe's gradient
std::vector<Tensor> probe_grad(const GradContext& c) {
  g_probe_masks.push_back(c.needs_mask);
  return {c.grads[0], c.grads[0], c.grads[0]};
}
void probe_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  out[0].data<float>()[0] = in[0].data<float>()[0] + in[1].data<float>()[0] + in[2].data<float>()[0];
}
const OpDef& needs_probe_op() {
  static const OpDef& d = [] {
    get_op("add");  // the built-in ops first
    register_op({.name = "test_needs_probe", .num_inputs = 3,
                 .infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
                   return std::vector<TensorSpec>{in[0]};
                 },
                 .grad = probe_grad, .kernels = {probe_kernel}});
    return std::ref(get_op("test_needs_probe"));
  }();
  return d;
}
}  // namespace

TEST(GradientTape, GradientDefinitionsSeeWhichInputsNeedAGradient) {
  Tensor a = constant(1.0f), b = constant(2.0f), c = constant(3.0f);
  GradientTape tape(/*persistent=*/true);
  tape.watch(a);
  tape.watch(c);
  Tensor y = call_op1(needs_probe_op(), {a, b, c});
  g_probe_masks.clear();
  tape.gradient(y, a);
  tape.gradient(y, std::vector<Tensor>{a, c});
  tape.gradient(y, c);
  ASSERT_EQ(g_probe_masks.size(), 3u);
  EXPECT_EQ(g_probe_masks[0], 0b001u);  // b is not watched, c not a source
  EXPECT_EQ(g_probe_masks[1], 0b101u);
  EXPECT_EQ(g_probe_masks[2], 0b100u);
}

TEST(GradientTape, MatmulSkipsTheProductForAnInputThatNeedsNoGradient) {
  // An outer tape watching w records the ops of the inner backward pass that touch w: computing
  // dx = g w^T would add a transpose and a matmul there; dw = x^T g touches no watched tensor.
  Tensor x = rand_tensor({4, 5}, 1), w = rand_tensor({5, 3}, 2);
  GradientTape outer(/*persistent=*/true);
  outer.watch(w);
  GradientTape inner;
  inner.watch(w);
  Tensor loss = sum(matmul(x, w));
  const std::size_t before = outer.num_recorded();
  Tensor dw = inner.gradient(loss, w);
  EXPECT_EQ(outer.num_recorded(), before) << "matmul's gradient computed dx nobody asked for";
  // The gradient itself is unchanged: dw = x^T ones.
  EXPECT_TRUE(all_close(dw, matmul(transpose(x, {1, 0}), ones_like(matmul(x, w)))));
}

TEST(GradientTape, MatmulStillComputesBothGradientsWhenBothAreWanted) {
  Tensor x = rand_tensor({4, 5}, 1), w = rand_tensor({5, 3}, 2);
  GradientTape tape;
  tape.watch(x);
  tape.watch(w);
  Tensor loss = sum(matmul(x, w));
  auto g = tape.gradient(loss, std::vector<Tensor>{x, w});
  Tensor ones = ones_like(matmul(x, w));
  EXPECT_TRUE(all_close(g[0], matmul(ones, transpose(w, {1, 0}))));
  EXPECT_TRUE(all_close(g[1], matmul(transpose(x, {1, 0}), ones)));
}

TEST(GradientTape, Conv2dSkipsBackpropInputForTheDataInput) {
  Tensor x = rand_tensor({1, 2, 5, 5}, 3), w = rand_tensor({3, 2, 3, 3}, 4);
  GradientTape outer(/*persistent=*/true);
  outer.watch(w);
  GradientTape inner;
  inner.watch(w);
  Tensor loss = sum(conv2d(x, w));
  const std::size_t before = outer.num_recorded();
  Tensor dw = inner.gradient(loss, w);
  EXPECT_EQ(outer.num_recorded(), before) << "conv2d's gradient computed dx nobody asked for";
  EXPECT_EQ(dw.shape(), w.shape());
}
