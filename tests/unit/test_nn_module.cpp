// nn::Module: names, lazy building, recursive parameter listing, trainable split, modes,
// state dicts, devices and regularisation losses.
#include <string>

#include "soma/nn/layers.hpp"
#include "soma/nn/module.hpp"
#include "soma/nn/normalization.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, v] : m.named_parameters()) out.push_back(n);
  return out;
}

// Two dense layers and an own weight, to test prefixes and ordering.
class Block : public nn::Module {
 public:
  Block() {
    fc1_ = register_module("fc1", nn::Dense(4, {}, {.dtype = DType::f64}));
    fc2_ = register_module("fc2", nn::Dense(2, {}, {.dtype = DType::f64}));
  }
  std::string type_name() const override { return "Block"; }

 protected:
  void build(const Shape&) override {
    scale_ = add_weight("scale", {1}, nn::init::ones(), {}, true, DType::f64);
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)((*fc1_)(x)) * scale_.value(); }

 private:
  nn::ModuleRef fc1_, fc2_;
  Variable scale_;
};

class Outer : public nn::Module {
 public:
  Outer() {
    block_ = register_module("block", Block());
    bn_ = register_module("bn", nn::BatchNormalization({.dtype = DType::f64}));
  }
  std::string type_name() const override { return "Outer"; }

 protected:
  Tensor forward(const Tensor& x) override { return (*bn_)((*block_)(x)); }

 private:
  nn::ModuleRef block_, bn_;
};

// Concatenates x with itself on the last axis: no output_shape override, so the default
// (probing) rule is used.
class Doubler : public nn::Module {
 public:
  std::string type_name() const override { return "Doubler"; }

 protected:
  Tensor forward(const Tensor& x) override { return concat({x, x}, -1); }
};

}  // namespace

TEST(ModuleNames, FollowKerasSnakeCaseWithPerTypeCounters) {
  nn::reset_layer_name_counters();
  nn::Dense a(3), b(3);
  nn::Flatten f;
  EXPECT_EQ(a.name(), "dense");
  EXPECT_EQ(b.name(), "dense_1");
  EXPECT_EQ(f.name(), "flatten");
  EXPECT_EQ(nn::unique_layer_name("Conv2DTranspose"), "conv2d_transpose");
  EXPECT_EQ(nn::unique_layer_name("LeakyReLU"), "leaky_re_lu");
  EXPECT_EQ(nn::unique_layer_name("BatchNormalization"), "batch_normalization");
  EXPECT_EQ(nn::unique_layer_name("SimpleRNN"), "simple_rnn");
  EXPECT_EQ(nn::unique_layer_name("GlobalAveragePooling2D"), "global_average_pooling2d");
}

TEST(ModuleNames, SetNameOverridesAndIsKeptByCopies) {
  nn::Dense d(3);
  d.set_name("head");
  EXPECT_EQ(d.name(), "head");
  nn::Dense copy = d;
  EXPECT_EQ(copy.name(), "head");
  EXPECT_THROW(d.set_name(""), Error);
}

TEST(ModuleNames, CopyOfAnAutomaticallyNamedLayerGetsAFreshName) {
  nn::Dense d(3);
  std::string first = d.name();
  nn::Dense copy = d;
  EXPECT_NE(copy.name(), first);
  EXPECT_TRUE(contains(copy.name(), "dense"));
}

TEST(ModuleBuild, IsLazyAndUsesTheFirstInputShape) {
  nn::Dense d(4, {}, {.dtype = DType::f64});
  EXPECT_FALSE(d.built());
  EXPECT_TRUE(d.parameters().empty());
  Tensor y = d(rand_tensor({2, 3}, 1));
  EXPECT_TRUE(d.built());
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(d.kernel().shape(), (Shape{3, 4}));
  EXPECT_EQ(d.bias().shape(), (Shape{4}));
}

TEST(ModuleBuild, BuildForCreatesWeightsWithoutRunning) {
  nn::Dense d(5);
  d.build_for({-1, 7});
  EXPECT_TRUE(d.built());
  EXPECT_EQ(d.kernel().shape(), (Shape{7, 5}));
  d.build_for({-1, 9});  // already built: no change
  EXPECT_EQ(d.kernel().shape(), (Shape{7, 5}));
}

TEST(ModuleBuild, CallWithSeveralInputsIsRejectedByOneInputLayers) {
  nn::Dense d(2);
  try {
    d.call({ones({1, 2}), ones({1, 2})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "Dense")) << e.what();
    EXPECT_TRUE(contains(e.what(), "takes 1 input, got 2")) << e.what();
  }
}

TEST(ModuleParameters, OwnFirstThenChildrenWithPrefixes) {
  Block b;
  b(rand_tensor({2, 3}, 2));
  EXPECT_EQ(names_of(b), (std::vector<std::string>{"scale", "fc1.kernel", "fc1.bias",
                                                   "fc2.kernel", "fc2.bias"}));
  EXPECT_EQ(b.named_parameters(/*recurse=*/false).size(), 1u);
}

TEST(ModuleParameters, PrefixesNestRecursively) {
  Outer o;
  o(rand_tensor({4, 3}, 3));
  EXPECT_EQ(names_of(o),
            (std::vector<std::string>{"block.scale", "block.fc1.kernel", "block.fc1.bias",
                                      "block.fc2.kernel", "block.fc2.bias", "bn.gamma", "bn.beta",
                                      "bn.moving_mean", "bn.moving_variance"}));
}

TEST(ModuleParameters, TrainableAndNonTrainableSplit) {
  Outer o;
  o(rand_tensor({4, 3}, 3));
  EXPECT_EQ(o.trainable_parameters().size(), 7u);
  ASSERT_EQ(o.non_trainable_parameters().size(), 2u);
  for (auto& v : o.non_trainable_parameters()) EXPECT_FALSE(v.trainable());
  // 1 + (3*4 + 4) + (4*2 + 2) + 4 * 2 = 35
  EXPECT_EQ(o.count_params(), 35);
}

TEST(ModuleParameters, Dense784To128Has100480Parameters) {
  nn::Dense d(128);
  d.build_for({-1, 784});
  EXPECT_EQ(d.count_params(), 100480);
}

TEST(ModuleParameters, VariablesAreNamedAfterTheLayer) {
  nn::Dense d(2);
  d.set_name("out");
  d.build_for({-1, 3});
  EXPECT_EQ(d.kernel().name(), "out/kernel");
  EXPECT_EQ(d.bias().name(), "out/bias");
}

TEST(ModuleMode, TrainAndEvalReachEverySubmodule) {
  Outer o;
  EXPECT_TRUE(o.training());
  o.eval();
  EXPECT_FALSE(o.training());
  for (auto& [n, c] : o.named_children()) {
    EXPECT_FALSE(c->training()) << n;
    for (auto& [n2, c2] : c->named_children()) EXPECT_FALSE(c2->training()) << n2;
  }
  o.train();
  for (auto& [n, c] : o.named_children()) EXPECT_TRUE(c->training()) << n;
}

TEST(ModuleOutputShape, DefaultProbesTheLayerAndKeepsAnUnknownBatch) {
  Doubler d;
  EXPECT_EQ(d.output_shape({-1, 3}), (Shape{-1, 6}));
  EXPECT_EQ(d.output_shape({5, 2, 3}), (Shape{5, 2, 6}));
}

TEST(ModuleOutputShape, ProbingLeavesModesAndMovingStatisticsAlone) {
  Outer o;
  o.build_for({-1, 3});
  o(rand_tensor({4, 3}, 4));  // builds the children
  auto before = o.state_dict();
  EXPECT_EQ(o.output_shape({-1, 3}), (Shape{-1, 2}));
  EXPECT_TRUE(o.training());
  for (auto& [n, c] : o.named_children()) EXPECT_TRUE(c->training()) << n;
  auto after = o.state_dict();
  for (auto& [k, v] : before) EXPECT_TRUE(all_close(after.at(k), v, 0, 0)) << k;
}

TEST(ModuleState, StateDictRoundTripMakesTwoModulesAgree) {
  Block a, b;
  Tensor x = rand_tensor({3, 3}, 5);
  Tensor ya = a(x);
  b.build_for(x.shape());
  b(x);
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(all_close(b(x), ya, 0, 0));
}

TEST(ModuleState, StateDictHoldsCopiesNotViews) {
  nn::Dense d(2, {}, {.dtype = DType::f64});
  d.build_for({-1, 2});
  auto state = d.state_dict();
  Tensor before = state.at("kernel").clone();
  Variable k = d.kernel();
  k.assign(zeros({2, 2}, DType::f64));
  EXPECT_TRUE(all_close(state.at("kernel"), before, 0, 0));
}

TEST(ModuleState, LoadRejectsMissingKeysNamingThem) {
  nn::Dense d(2);
  d.build_for({-1, 3});
  auto state = d.state_dict();
  state.erase("bias");
  try {
    d.load_state_dict(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "load_state_dict")) << e.what();
    EXPECT_TRUE(contains(e.what(), "missing keys 'bias'")) << e.what();
  }
}

TEST(ModuleState, LoadRejectsUnexpectedKeysNamingThem) {
  nn::Dense d(2);
  d.build_for({-1, 3});
  auto state = d.state_dict();
  state["gamma"] = ones({2});
  try {
    d.load_state_dict(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "unexpected keys 'gamma'")) << e.what();
  }
}

TEST(ModuleState, NonStrictLoadIgnoresExtraAndMissingKeys) {
  nn::Dense d(2);
  d.build_for({-1, 3});
  std::map<std::string, Tensor> state{{"kernel", ones({3, 2})}, {"other", ones({1})}};
  d.load_state_dict(state, /*strict=*/false);
  EXPECT_TRUE(all_close(d.kernel().value(), ones({3, 2}), 0, 0));
}

TEST(ModuleState, LoadRejectsAShapeMismatchNamingKeyAndShapes) {
  nn::Dense d(2);
  d.build_for({-1, 3});
  auto state = d.state_dict();
  state["kernel"] = ones({4, 2});
  Tensor before = d.bias().value().clone();
  state["bias"] = fill({2}, 7.0);
  try {
    d.load_state_dict(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "shape mismatch for 'kernel'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "expected [3, 2], got [4, 2]")) << e.what();
  }
  // Nothing was written: the check comes before any assignment.
  EXPECT_TRUE(all_close(d.bias().value(), before, 0, 0));
}

TEST(ModuleState, LoadRejectsADtypeMismatch) {
  nn::Dense d(2);
  d.build_for({-1, 3});
  auto state = d.state_dict();
  state["bias"] = zeros({2}, DType::f64);
  try {
    d.load_state_dict(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "dtype mismatch for 'bias': expected f32, got f64")) << e.what();
  }
}

TEST(ModuleState, LoadIntoAnUnbuiltModuleExplainsWhy) {
  nn::Dense src(2);
  src.build_for({-1, 3});
  nn::Dense dst(2);
  try {
    dst.load_state_dict(src.state_dict());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "not built yet")) << e.what();
  }
}

TEST(ModuleDevice, ToCpuIsANoOpAndOtherDevicesNameTheModule) {
  nn::Dense d(2);
  d.set_name("head");
  d.build_for({-1, 3});
  EXPECT_NO_THROW(d.to(Device::cpu()));
  try {
    d.to(Device::cuda(0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'head'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
  }
}

TEST(ModuleRegularization, LossesOfEveryRegularisedWeightIncludingChildren) {
  class Net : public nn::Module {
   public:
    Net() {
      a_ = register_module(
          "a", nn::Dense(3, {}, {.bias_initializer = nn::init::constant(2.0),
                                 .kernel_regularizer = nn::regularizers::l2(0.5),
                                 .bias_regularizer = nn::regularizers::l1(0.25),
                                 .dtype = DType::f64}));
    }
    std::string type_name() const override { return "Net"; }
    nn::ModuleRef a_;

   protected:
    Tensor forward(const Tensor& x) override { return (*a_)(x); }
  };
  Net n;
  n(rand_tensor({1, 2}, 6));
  auto losses = n.regularization_losses();
  ASSERT_EQ(losses.size(), 2u);
  auto* dense = dynamic_cast<nn::Dense*>(n.a_.get());
  double k2 = 0;
  for (double v : dense->kernel().value().to_vector<double>()) k2 += v * v;
  EXPECT_NEAR(losses[0].item<double>(), 0.5 * k2, 1e-12);
  EXPECT_NEAR(losses[1].item<double>(), 0.25 * 3 * 2.0, 1e-12);
}

TEST(ModuleWeights, DuplicateWeightNamesAreRejected) {
  class Twice : public nn::Module {
   public:
    std::string type_name() const override { return "Twice"; }

   protected:
    void build(const Shape&) override {
      add_weight("w", ones({1}));
      add_weight("w", ones({1}));
    }
    Tensor forward(const Tensor& x) override { return x; }
  };
  Twice t;
  try {
    t(ones({1, 1}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "already has a weight named 'w'")) << e.what();
  }
  EXPECT_FALSE(t.built());
}

TEST(ModuleCopy, CopyOfABuiltModuleIsUnbuiltAndSharesNoWeights) {
  nn::Dense d(2, {}, {.dtype = DType::f64});
  d(rand_tensor({1, 3}, 7));
  nn::Dense c = d;
  EXPECT_FALSE(c.built());
  c(rand_tensor({1, 3}, 7));
  EXPECT_NE(c.kernel().value().storage(), d.kernel().value().storage());
}

TEST(ModuleFreezing, SetTrainableFalseFreezesEveryWeightAndTrueRestoresThem) {
  Outer o;
  o(rand_tensor({4, 3}, 8));
  o.set_trainable(false);
  EXPECT_FALSE(o.trainable());
  EXPECT_TRUE(o.trainable_parameters().empty());
  EXPECT_EQ(o.non_trainable_parameters().size(), 9u);
  o.set_trainable(true);
  EXPECT_EQ(o.trainable_parameters().size(), 7u);
  EXPECT_EQ(o.non_trainable_parameters().size(), 2u);  // moving statistics stay non-trainable
}

TEST(ModuleFreezing, FrozenWeightsAreNotWatchedByTapes) {
  nn::Dense d(2, {}, {.dtype = DType::f64});
  Tensor x = rand_tensor({3, 2}, 9);
  d.build_for(x.shape());
  d.set_trainable(false);
  GradientTape tape;
  Tensor y = d(x);
  EXPECT_FALSE(tape.gradient(sum(y), d.kernel()).defined());
}

TEST(ModuleFreezing, AModuleFrozenBeforeBuildingCreatesFrozenWeights) {
  nn::Dense d(2);
  d.set_trainable(false);
  d.build_for({-1, 3});
  EXPECT_TRUE(d.trainable_parameters().empty());
  EXPECT_EQ(d.count_params(), 8);
}
