// Gradient accumulation (the optimisers' gradient_accumulation_steps, Keras 3's place for it)
// and the weight decay filter (Optimizer::exclude_from_weight_decay / set_weight_decay_filter),
// include/soma/optim/optimizer.hpp.
#include <gtest/gtest.h>

#include "soma/model/serialization.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

nn::Sequential small_model() {
  set_seed(11);
  nn::Sequential m{nn::Input({3}), nn::Dense(5, nn::tanh), nn::LayerNormalization(), nn::Dense(1)};
  return m;
}

void expect_same_weights(const nn::Sequential& a, const nn::Sequential& b, double tol) {
  auto wa = a.get_weights(), wb = b.get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (auto& [k, v] : wa) EXPECT_TRUE(all_close(wb.at(k), v, tol, tol)) << k;
}

// k micro-batches of b with accumulation against batches of k * b: the same weights.
void check_fit_equivalence(optim::OptimizerRef big_opt, optim::OptimizerRef acc_opt, bool jit) {
  Tensor x = rand_tensor({48, 3}, 1), y = rand_tensor({48, 1}, 2);
  auto big = small_model(), acc = small_model();
  expect_same_weights(big, acc, 0.0);
  big.compile(big_opt, "mse");
  acc.compile(acc_opt, "mse", {}, {.jit = jit});
  big.fit(x, y, {.epochs = 3, .batch_size = 16, .shuffle = false, .verbose = 0});
  acc.fit(x, y, {.epochs = 3, .batch_size = 4, .shuffle = false, .verbose = 0});
  EXPECT_EQ(big.optimizer().iterations(), 9);
  EXPECT_EQ(acc.optimizer().iterations(), 9);  // updates, not calls
  EXPECT_EQ(acc.optimizer().accumulated_steps(), 0);
  expect_same_weights(big, acc, 1e-5);
  // ... and the run without accumulation differs (the test can fail).
  auto plain = small_model();
  plain.compile(optim::SGD({.learning_rate = 0.1}), "mse");
  plain.fit(x, y, {.epochs = 3, .batch_size = 4, .shuffle = false, .verbose = 0});
  EXPECT_FALSE(all_close(plain.get_weights().begin()->second, big.get_weights().begin()->second,
                         1e-5, 1e-5));
}

}  // namespace

TEST(GradientAccumulation, SgdMicroBatchesEqualOneBigBatch) {
  check_fit_equivalence(optim::SGD({.learning_rate = 0.1}),
                        optim::SGD({.learning_rate = 0.1, .gradient_accumulation_steps = 4}),
                        false);
}

TEST(GradientAccumulation, SgdMicroBatchesEqualOneBigBatchWithJit) {
  check_fit_equivalence(optim::SGD({.learning_rate = 0.1}),
                        optim::SGD({.learning_rate = 0.1, .gradient_accumulation_steps = 4}),
                        true);
}

TEST(GradientAccumulation, AdamWWithClippingEqualsOneBigBatch) {
  // Clipping and the bias correction see the mean gradient and the update count.
  check_fit_equivalence(
      optim::AdamW({.learning_rate = 0.01, .weight_decay = 0.01, .global_clipnorm = 0.5}),
      optim::AdamW({.learning_rate = 0.01, .weight_decay = 0.01, .global_clipnorm = 0.5,
                    .gradient_accumulation_steps = 4}),
      false);
}

TEST(GradientAccumulation, UpdatesEveryKthCallWithTheMean) {
  Variable w(constant(std::vector<double>{1.0, 2.0}, Shape{2}), "w");
  optim::SGD opt({.learning_rate = 1.0, .gradient_accumulation_steps = 3});
  opt.apply_gradients({constant(std::vector<double>{1.0, 0.0}, Shape{2})}, {w});
  opt.apply_gradients({constant(std::vector<double>{2.0, 3.0}, Shape{2})}, {w});
  EXPECT_TRUE(all_close(w.value(), {1.0, 2.0}));
  EXPECT_EQ(opt.iterations(), 0);
  EXPECT_EQ(opt.accumulated_steps(), 2);
  // The state (accumulators and the call count) survives a save and load.
  optim::SGD resumed({.learning_rate = 1.0, .gradient_accumulation_steps = 3});
  resumed.load_state_dict(opt.state_dict({w}), {w});
  EXPECT_EQ(resumed.accumulated_steps(), 2);
  resumed.apply_gradients({constant(std::vector<double>{3.0, 0.0}, Shape{2})}, {w});
  EXPECT_TRUE(all_close(w.value(), {1.0 - 2.0, 2.0 - 1.0}));
  EXPECT_EQ(resumed.iterations(), 1);
  EXPECT_EQ(resumed.accumulated_steps(), 0);
  EXPECT_THROW(optim::SGD({.gradient_accumulation_steps = 0}), Error);
}

TEST(GradientAccumulation, IsInTheOptimizerConfig) {
  optim::Adam a({.gradient_accumulation_steps = 4});
  auto cfg = serialization::optimizer_config(a);
  EXPECT_NE(cfg.find("\"gradient_accumulation_steps\":4"), std::string::npos) << cfg;
  auto back = serialization::optimizer_from_config(cfg);
  EXPECT_EQ(back->gradient_accumulation_steps(), 4);
}

// ---- weight decay filter -------------------------------------------------------------------

namespace {
// Zero gradients: only the decoupled weight decay moves the variables (var *= 1 - lr * wd).
void decay_once(optim::Optimizer& opt, std::vector<Variable>& vars) {
  std::vector<Tensor> g;
  for (auto& v : vars) g.push_back(zeros_like(v.value()));
  opt.apply_gradients(g, vars);
}
}  // namespace

TEST(WeightDecayFilter, NothingExcludedByDefaultThenByNameListOrPredicate) {
  for (bool fused : {true, false}) {
    optim::Optimizer::set_fused_kernels(fused);
    for (int which = 0; which < 2; ++which) {
      auto make = [&]() -> optim::OptimizerRef {
        if (which == 0) return optim::AdamW({.learning_rate = 0.5, .weight_decay = 0.1});
        return optim::SGD({.learning_rate = 0.5, .weight_decay = 0.1});
      };
      auto vars = [] {
        return std::vector<Variable>{Variable(constant(std::vector<double>{2.0}, Shape{1}), "dense/kernel"),
                                     Variable(constant(std::vector<double>{2.0}, Shape{1}), "dense/bias"),
                                     Variable(constant(std::vector<double>{2.0}, Shape{1}), "layer_normalization/gamma")};
      };
      const double decayed = 2.0 * (1.0 - 0.5 * 0.1);
      {  // default: everything decays (Keras)
        auto opt = make();
        auto v = vars();
        decay_once(*opt, v);
        for (auto& x : v) EXPECT_NEAR(x.value().item<double>(), decayed, 1e-6) << x.name();
      }
      {  // var_names: regular expressions searched in the names
        auto opt = make();
        opt->exclude_from_weight_decay({}, {"bias", "gam+a"});
        auto v = vars();
        decay_once(*opt, v);
        EXPECT_NEAR(v[0].value().item<double>(), decayed, 1e-6);
        EXPECT_NEAR(v[1].value().item<double>(), 2.0, 1e-12);
        EXPECT_NEAR(v[2].value().item<double>(), 2.0, 1e-12);
      }
      {  // var_list
        auto opt = make();
        auto v = vars();
        opt->exclude_from_weight_decay({v[0]});
        decay_once(*opt, v);
        EXPECT_NEAR(v[0].value().item<double>(), 2.0, 1e-12);
        EXPECT_NEAR(v[1].value().item<double>(), decayed, 1e-6);
      }
      {  // a predicate on the variable: decay only rank >= 2 (none here)
        auto opt = make();
        opt->set_weight_decay_filter([](const Variable& x) { return x.value().rank() >= 2; });
        auto v = vars();
        decay_once(*opt, v);
        for (auto& x : v) EXPECT_NEAR(x.value().item<double>(), 2.0, 1e-12) << x.name();
      }
    }
  }
  optim::Optimizer::set_fused_kernels(true);
  optim::SGD bad;
  EXPECT_THROW(bad.exclude_from_weight_decay({}, {"(unclosed"}), Error);
}

TEST(WeightDecayFilter, NormsAndBiasesOfAModelKeepTheirValues) {
  auto m = small_model();
  optim::OptimizerRef opt = optim::AdamW({.learning_rate = 0.1, .weight_decay = 0.5});
  opt->exclude_from_weight_decay({}, {"bias$", "gamma$", "beta$"});
  m.compile(opt, "mse");
  auto before = m.get_weights();
  // Zero gradients: only the weight decay moves a variable.
  std::vector<Variable> vars = m.trainable_parameters();
  std::vector<Tensor> zero;
  for (auto& v : vars) zero.push_back(zeros_like(v.value()));
  opt->apply_gradients(zero, vars);
  auto after = m.get_weights();
  int kept = 0, decayed = 0;
  for (auto& [k, v] : before) {
    const bool excluded = k.ends_with("bias") || k.ends_with("gamma") || k.ends_with("beta");
    if (excluded) {
      EXPECT_TRUE(all_close(after.at(k), v, 0.0, 0.0)) << k;
      ++kept;
    } else {
      EXPECT_TRUE(all_close(after.at(k), v * (1.0 - 0.1 * 0.5), 1e-6, 1e-6)) << k;
      ++decayed;
    }
  }
  EXPECT_EQ(kept, 4);     // two biases, gamma, beta
  EXPECT_EQ(decayed, 2);  // two kernels
}
