// Issue 21: what is picked by name or type is read from a definition or a virtual, so that a new
// op, layer, loss, metric or callback is picked up with no edit elsewhere: an op tagged
// kActivation is an activation by name (layers and model files); a layer says its output
// activation; a loss its targets and from_logits; a metric settles itself from the loss; a
// layer names its non-negative weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "soma/model/weight_checks.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::error_of;

namespace {

// ---- an op tagged kActivation ---------------------------------------------------------------
void cube_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  const double k = attrs.f("scale");
  for (std::int64_t i = 0; i < in[0].numel(); ++i) y[i] = float(k * x[i] * x[i] * x[i]);
}

// Registers "test_cube" (scale * x^3, scale defaulting to 2) once.
void register_cube() {
  static const bool once = [] {
    get_op("add");  // the built-in ops first
    register_op({.name = "test_cube",
                 .num_inputs = 1,
                 .infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
                   return std::vector<TensorSpec>{in[0]};
                 },
                 .kernels = {cube_kernel},
                 .tags = kElementwiseUnary | kActivation,
                 .attrs = {{"scale", 2.0}}});
    return true;
  }();
  (void)once;
}

TEST(ExtensionPoints, AnOpTaggedActivationIsAnActivationByName) {
  register_cube();
  nn::Activation a("test_cube");
  EXPECT_EQ(a.name, "test_cube");
  Tensor x = constant({-1.0f, 0.5f, 2.0f});
  EXPECT_EQ(a(x).to_vector<float>(), (std::vector<float>{-2.0f, 0.25f, 16.0f}));
  // In a layer, by name.
  nn::Sequential m{nn::Input({2}), nn::Dense(3, "test_cube")};
  EXPECT_EQ(m.predict(ones({4, 2})).shape(), (Shape{4, 3}));
  EXPECT_EQ(nn::output_activation(m), "test_cube");
  // And listed among the known names when a name is unknown.
  const std::string msg = error_of([] { nn::Activation bad("test_cubex"); });
  EXPECT_NE(msg.find("unknown activation 'test_cubex'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cube"), std::string::npos) << msg;
}

TEST(ExtensionPoints, AnOpTaggedActivationRoundTripsThroughAModelFile) {
  register_cube();
  nn::Sequential m{nn::Input({2}), nn::Dense(3, "test_cube")};
  Tensor x = ones({4, 2});
  Tensor before = m.predict(x);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("soma_ext_points_" + std::to_string(::getpid()) + ".soma"))
                               .string();
  m.save(path);
  auto loaded = load_model(path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded->predict(x).to_vector<float>(), before.to_vector<float>());
}

TEST(ExtensionPoints, UntaggedOpsAreNotActivations) {
  // "exp" is a registered unary op without kActivation.
  const std::string msg = error_of([] { nn::Activation bad("exp"); });
  EXPECT_NE(msg.find("unknown activation 'exp'"), std::string::npos) << msg;
}

TEST(ExtensionPoints, BuiltInActivationsKeepTheirBehaviour) {
  Tensor x = constant({-1.0f, 2.0f});
  EXPECT_EQ(nn::Activation("leaky_relu")(x).to_vector<float>(), (std::vector<float>{-0.2f, 2.0f}));
  EXPECT_EQ(nn::Activation("silu").name, "swish");
  EXPECT_TRUE(nn::Activation("identity").is_linear());
  const std::string msg = error_of([] { (void)nn::sigmoid(ones({2}, DType::i32)); });
  EXPECT_NE(msg.find("sigmoid: dtype i32 is not supported"), std::string::npos) << msg;
}

// ---- a layer that says its output activation ------------------------------------------------
class Probabilities : public nn::Module {
 public:
  std::string type_name() const override { return "Probabilities"; }
  std::string output_activation_name() const override { return "softmax"; }

 protected:
  Tensor forward(const Tensor& x) override { return softmax(x, -1); }
};

class Shuffle : public nn::Module {  // moves values, keeps their meaning
 public:
  std::string type_name() const override { return "Shuffle"; }
  bool passes_activation_through() const override { return true; }

 protected:
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(ExtensionPoints, ALayerSaysItsOutputActivation) {
  nn::Sequential m{nn::Input({3}), nn::Dense(3), Probabilities(), Shuffle()};
  EXPECT_EQ(nn::output_activation(m), "softmax");
  EXPECT_FALSE(nn::from_logits_for(m));
  auto in = nn::Input({3});
  auto out = nn::call(Shuffle(), nn::call(Probabilities(), nn::call(nn::Dense(3), in)));
  nn::Model f(in, out);
  EXPECT_EQ(nn::output_activation(f), "softmax");
}

// ---- a loss that says its targets and from_logits -------------------------------------------
class MyBinaryLoss : public nn::Loss {
 public:
  std::string name() const override { return "my_binary_loss"; }
  nn::TargetKind target_kind() const override { return nn::TargetKind::Binary; }
  bool from_logits() const override { return true; }

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override {
    return nn::losses::binary_crossentropy(y_true, y_pred, true);
  }
};

TEST(ExtensionPoints, AccuracyFollowsTheLossTargets) {
  metrics::Accuracy acc;
  acc.resolve_for_loss(MyBinaryLoss());
  EXPECT_EQ(acc.mode(), metrics::AccuracyMode::Binary);
  metrics::Accuracy other;
  other.resolve_for_loss(nn::MeanSquaredError());
  EXPECT_EQ(other.mode(), metrics::AccuracyMode::Auto);
}

// ---- a metric that settles itself from the loss ---------------------------------------------
class LossAwareMetric : public metrics::Metric {
 public:
  void update_state(const Tensor&, const Tensor&, const Tensor&) override {}
  double result() const override { return 0.0; }
  void reset_state() override {}
  std::string name() const override { return "loss_aware"; }
  void resolve_for_loss(const nn::Loss& loss) override { seen = loss.name(); }
  std::string seen;
};

TEST(ExtensionPoints, CompileGivesEveryMetricItsLoss) {
  nn::Sequential m{nn::Input({2}), nn::Dense(1)};
  auto metric = std::make_shared<LossAwareMetric>();
  m.compile(optim::SGD(), nn::MeanSquaredError(), {metrics::MetricRef(metric)});
  EXPECT_EQ(metric->seen, "mean_squared_error");
}

// ---- a layer with a weight that must stay >= 0 ----------------------------------------------
class Scale : public nn::Module {
 public:
  std::string type_name() const override { return "Scale"; }
  std::vector<std::string> nonnegative_weights() const override { return {"variance"}; }

 protected:
  void build(const Shape&) override {
    add_weight("variance", constant({1.0f, -1.0f}));
  }
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(ExtensionPoints, ALayerNamesItsNonNegativeWeights) {
  nn::Sequential m{nn::Input({2}), Scale()};
  auto problems = check_weights(m);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].variable, "variance");
  EXPECT_EQ(problems[0].negative_count, 1);
}

}  // namespace
