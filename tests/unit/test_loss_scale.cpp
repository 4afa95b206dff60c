// Dynamic loss scaling (optim::LossScaleOptimizer, soma/optim/loss_scale.hpp), all on the CPU:
// forced overflow (skipped steps, halving scale, untouched weights and slots), growth after N
// good steps, the fixed-scale mode, state_dict and config round trips, and compile's f16
// mixed precision training to the f32 loss.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "emulated_device.hpp"
#include "soma/cuda.hpp"
#include "soma/model/serialization.hpp"
#include "soma/optim/loss_scale.hpp"
#include "soma/optim/optimizers.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

using Vec = std::vector<double>;

Vec values(const Tensor& t) { return t.cast(DType::f64).to_vector<double>(); }

// Bitwise equality of two state dicts (same keys, same values).
void expect_same_state(const std::map<std::string, Tensor>& a,
                       const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, t] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    EXPECT_EQ(values(t), values(b.at(k))) << k;
  }
}

struct Problem {
  Variable w{constant(Vec{0.5, -1.5, 2.0}, {3}).cast(DType::f32), "w"};
  Variable b{constant(Vec{0.25}, {1}).cast(DType::f32), "b"};
  std::vector<Variable> vars() const { return {w, b}; }
  // L = sum(100 w^2) + sum(3 b): finite gradients 200 w and 3.
  Tensor loss() const { return sum(w * w * 100.0) + sum(b * 3.0); }
  // One training step through the optimiser, as fit does: gradients of the scaled loss.
  void step(optim::LossScaleOptimizer& opt) const {
    GradientTape tape;
    Tensor l = opt.scale_loss(loss());
    opt.apply_gradients(tape.gradient(l, vars()), vars());
  }
};

TEST(LossScale, ForcedOverflowSkipsStepsAndHalvesTheScale) {
  Problem p;
  // 2^127 * L overflows f32 (max ~3.4e38): the gradients are inf until the scale has come down.
  const double big = std::ldexp(1.0, 127);
  optim::LossScaleOptimizer opt(optim::Adam({.learning_rate = 0.1}), {.initial_scale = big});
  const Vec w0 = values(p.w.value()), b0 = values(p.b.value());
  int skipped = 0;
  double expected = big;
  for (; skipped < 40; ++skipped) {
    ASSERT_EQ(opt.scale(), expected);
    p.step(opt);
    if (!opt.last_step_skipped()) break;
    expected /= 2.0;  // halved on every skipped step
    EXPECT_EQ(opt.scale(), expected);
    EXPECT_EQ(opt.iterations(), 0);
    EXPECT_EQ(opt.inner_optimizer().iterations(), 0);
    EXPECT_EQ(values(p.w.value()), w0);  // unchanged, hence finite
    EXPECT_EQ(values(p.b.value()), b0);
    // No Adam slot was created: only iterations, learning_rate and the scale state.
    for (const auto& [k, t] : opt.state_dict(p.vars())) EXPECT_EQ(k.find('/'), std::string::npos) << k;
  }
  // dL/dw = 200 w, largest 400 (w = 2): scale * 400 overflows f32 (3.4e38) for scale >= 2^120,
  // so 2^127 ... 2^120 are skipped (8 steps) and 2^119 applies.
  EXPECT_EQ(skipped, 8);
  EXPECT_EQ(opt.scale(), std::ldexp(1.0, 119));
  EXPECT_FALSE(opt.last_step_skipped());
  EXPECT_EQ(opt.iterations(), 1);
  EXPECT_EQ(opt.good_steps(), 1);
  for (double v : values(p.w.value())) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(values(p.w.value()), w0);
}

TEST(LossScale, InjectedInfOrNanLeavesWeightsAndSlotsUntouched) {
  Problem p;
  optim::LossScaleOptimizer opt(optim::Adam({.learning_rate = 0.1}), {.initial_scale = 1024.0});
  p.step(opt);  // a good step: Adam's slots exist now
  p.step(opt);
  ASSERT_EQ(opt.iterations(), 2);
  ASSERT_EQ(opt.good_steps(), 2);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    const auto before = opt.state_dict(p.vars());
    const Vec w0 = values(p.w.value()), b0 = values(p.b.value());
    const double scale = opt.scale();
    // A finite gradient for w, a bad element in b's: the whole step is skipped.
    std::vector<Tensor> grads{fill({3}, 1.0, DType::f32), constant(std::vector<float>{bad}, {1})};
    opt.apply_gradients(grads, p.vars());
    EXPECT_TRUE(opt.last_step_skipped());
    EXPECT_EQ(opt.scale(), scale / 2.0);
    EXPECT_EQ(opt.good_steps(), 0);
    EXPECT_EQ(opt.iterations(), 2);
    EXPECT_EQ(values(p.w.value()), w0);
    EXPECT_EQ(values(p.b.value()), b0);
    auto after = opt.state_dict(p.vars());
    EXPECT_EQ(after.at("loss_scale").item<double>(), scale / 2.0);
    after["loss_scale"] = before.at("loss_scale");
    after["loss_scale_good_steps"] = before.at("loss_scale_good_steps");
    expect_same_state(before, after);  // every Adam moment bit-identical
  }
}

TEST(LossScale, NonContiguousAndF64GradientsAreChecked) {
  Variable a(zeros({2, 2}, DType::f32), "a"), d(zeros({2}, DType::f64), "d");
  optim::LossScaleOptimizer opt(optim::SGD({.learning_rate = 1.0}), {.initial_scale = 4.0});
  Tensor g = transpose(constant(std::vector<float>{1, 2, std::numeric_limits<float>::infinity(), 4}, {2, 2}), {1, 0});
  opt.apply_gradients(std::vector<Tensor>{g, fill({2}, 1.0, DType::f64)}, {a, d});
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(values(d.value()), (Vec{0.0, 0.0}));
  opt.apply_gradients(std::vector<Tensor>{zeros({2, 2}), constant(Vec{std::nan(""), 1.0}, {2})}, {a, d});
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(opt.scale(), 1.0);
  // A good step divides by the scale: SGD with lr 1 subtracts g / 1.
  opt.apply_gradients(std::vector<Tensor>{fill({2, 2}, 2.0, DType::f32), fill({2}, 3.0, DType::f64)}, {a, d});
  EXPECT_FALSE(opt.last_step_skipped());
  EXPECT_EQ(values(d.value()), (Vec{-3.0, -3.0}));
}

TEST(LossScale, UnscalesGradientsBeforeTheUpdate) {
  // SGD lr 1 on the scaled loss: the update must be the unscaled gradient.
  Variable w(constant(Vec{1.0, -2.0}, {2}).cast(DType::f32), "w");
  optim::LossScaleOptimizer opt(optim::SGD({.learning_rate = 0.5}), {.initial_scale = 65536.0});
  GradientTape tape;
  Tensor l = opt.scale_loss(sum(w * w));
  EXPECT_EQ(l.item<float>(), 5.0f * 65536.0f);
  opt.apply_gradients(tape.gradient(l, std::vector<Variable>{w}), {w});
  EXPECT_EQ(values(w.value()), (Vec{0.0, 0.0}));  // w - 0.5 * 2w
}

TEST(LossScale, ScaleDoublesAfterGrowthStepsGoodSteps) {
  Problem p;
  optim::LossScaleOptimizer opt(optim::SGD({.learning_rate = 1e-4}),
                                {.initial_scale = 8.0, .dynamic_growth_steps = 3});
  p.step(opt);
  p.step(opt);
  EXPECT_EQ(opt.scale(), 8.0);
  EXPECT_EQ(opt.good_steps(), 2);
  p.step(opt);
  EXPECT_EQ(opt.scale(), 16.0);
  EXPECT_EQ(opt.good_steps(), 0);
  p.step(opt);
  p.step(opt);
  EXPECT_EQ(opt.good_steps(), 2);
  // An overflow resets the count: three more good steps are needed.
  opt.apply_gradients(std::vector<Tensor>{fill({3}, std::nan(""), DType::f32), fill({1}, 1.0, DType::f32)}, p.vars());
  EXPECT_EQ(opt.scale(), 8.0);
  EXPECT_EQ(opt.good_steps(), 0);
  p.step(opt);
  p.step(opt);
  EXPECT_EQ(opt.scale(), 8.0);
  p.step(opt);
  EXPECT_EQ(opt.scale(), 16.0);
  EXPECT_EQ(opt.iterations(), 8);  // good steps only
}

TEST(LossScale, FixedScaleNeverChangesButStillSkips) {
  Problem p;
  optim::LossScaleOptimizer opt(optim::SGD({.learning_rate = 1e-4}),
                                {.initial_scale = 128.0, .dynamic_growth_steps = 1, .dynamic = false});
  for (int i = 0; i < 5; ++i) p.step(opt);
  EXPECT_EQ(opt.scale(), 128.0);
  const Vec w0 = values(p.w.value());
  opt.apply_gradients(std::vector<Tensor>{fill({3}, std::numeric_limits<double>::infinity(), DType::f32),
                       fill({1}, 1.0, DType::f32)},
                      p.vars());
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(opt.scale(), 128.0);
  EXPECT_EQ(values(p.w.value()), w0);
  EXPECT_EQ(opt.iterations(), 5);
}

TEST(LossScale, StateDictRoundTripContinuesBitIdentically) {
  Problem p;
  optim::LossScaleOptimizer a(optim::Adam({.learning_rate = 0.05}),
                              {.initial_scale = 256.0, .dynamic_growth_steps = 2});
  for (int i = 0; i < 3; ++i) p.step(a);
  a.apply_gradients(std::vector<Tensor>{fill({3}, std::nan(""), DType::f32), Tensor()}, p.vars());
  p.step(a);
  const auto state = a.state_dict(p.vars());
  EXPECT_EQ(state.at("loss_scale").item<double>(), a.scale());
  EXPECT_EQ(state.at("loss_scale_good_steps").item<std::int64_t>(), 1);
  EXPECT_EQ(state.at("iterations").item<std::int64_t>(), 4);

  Problem q;  // copies of the variables
  q.w.assign(copy(p.w.value()));
  q.b.assign(copy(p.b.value()));
  optim::LossScaleOptimizer b(optim::Adam({.learning_rate = 0.05}),
                              {.initial_scale = 256.0, .dynamic_growth_steps = 2});
  b.load_state_dict(state, q.vars());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.good_steps(), 1);
  EXPECT_EQ(b.iterations(), 4);
  for (int i = 0; i < 3; ++i) {
    p.step(a);
    q.step(b);
  }
  EXPECT_EQ(values(p.w.value()), values(q.w.value()));
  EXPECT_EQ(b.scale(), a.scale());
  expect_same_state(a.state_dict(p.vars()), b.state_dict(q.vars()));

  // A plain optimiser's state has no scale.
  optim::Adam plain;
  try {
    b.load_state_dict(plain.state_dict(q.vars()), q.vars());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LossScaleOptimizer.load_state_dict"), std::string::npos);
  }
  b.reset_state();
  EXPECT_EQ(b.scale(), 256.0);
  EXPECT_EQ(b.iterations(), 0);
}

TEST(LossScale, ConfigRoundTripNestsTheInnerOptimizer) {
  optim::LossScaleOptimizer opt(optim::Adam({.learning_rate = 0.002, .beta_1 = 0.8}),
                                {.initial_scale = 512.0, .dynamic_growth_steps = 7, .dynamic = false});
  const std::string config = serialization::optimizer_config(opt);
  EXPECT_NE(config.find("\"initial_scale\":512"), std::string::npos) << config;
  EXPECT_NE(config.find("\"inner_optimizer\""), std::string::npos) << config;
  optim::OptimizerRef back = serialization::optimizer_from_config(config);
  auto* ls = dynamic_cast<optim::LossScaleOptimizer*>(back.get());
  ASSERT_NE(ls, nullptr);
  EXPECT_EQ(ls->scale(), 512.0);
  EXPECT_EQ(ls->options().dynamic_growth_steps, 7);
  EXPECT_FALSE(ls->options().dynamic);
  auto* adam = dynamic_cast<optim::Adam*>(&ls->inner_optimizer());
  ASSERT_NE(adam, nullptr);
  EXPECT_DOUBLE_EQ(adam->learning_rate(), 0.002);
  EXPECT_DOUBLE_EQ(adam->options().beta_1, 0.8);
  EXPECT_EQ(serialization::optimizer_config(*back), config);
}

TEST(LossScale, RejectsBadOptions) {
  EXPECT_THROW(optim::LossScaleOptimizer(optim::SGD(), {.initial_scale = 0.0}), Error);
  EXPECT_THROW(optim::LossScaleOptimizer(optim::SGD(), {.initial_scale = INFINITY}), Error);
  EXPECT_THROW(optim::LossScaleOptimizer(optim::SGD(), {.dynamic_growth_steps = 0}), Error);
  const optim::OptimizerRef null, wrapped = optim::LossScaleOptimizer(optim::SGD());
  EXPECT_THROW(optim::LossScaleOptimizer{null}, Error);
  EXPECT_THROW(optim::LossScaleOptimizer{wrapped}, Error);  // already a LossScaleOptimizer
}

TEST(LossScale, RateAndIterationsAreTheInnerOptimizers) {
  optim::LossScaleOptimizer opt(optim::SGD({.learning_rate = 0.1}));
  opt.set_learning_rate(0.01);  // what ReduceLROnPlateau does through model.optimizer()
  EXPECT_DOUBLE_EQ(opt.inner_optimizer().learning_rate(), 0.01);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.01);
}

// ---- on a device (the CPU stand-in of tests/support/emulated_device.hpp) ----

TEST(LossScale, OnADeviceTheCheckReadsOneScalarPerStep) {
  soma::testing::EmulatedCuda gpu;
  const Device dev = gpu.device();
  std::vector<Variable> vars;
  for (int i = 0; i < 4; ++i) vars.emplace_back(fill({3, 2}, 1.0 + i, DType::f32).to(dev));
  optim::LossScaleOptimizer opt(optim::Adam({.learning_rate = 0.1}), {.initial_scale = 8.0});
  auto grads = [&](float bad_at_2) {
    std::vector<Tensor> g;
    for (int i = 0; i < 4; ++i) {
      Tensor t = fill({3, 2}, 8.0, DType::f32);  // 1 after unscaling
      if (i == 2) t = t * constant(std::vector<float>{1, 1, 1, bad_at_2, 1, 1}, {3, 2});
      g.push_back(t.to(dev));
    }
    return g;
  };
  auto good = grads(1.0f), bad = grads(std::numeric_limits<float>::infinity());
  cuda::reset_transfer_stats();
  opt.apply_gradients(good, vars);
  EXPECT_FALSE(opt.last_step_skipped());
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 1u);  // not one per variable
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u);
  auto state = [&] {
    std::vector<Vec> out;
    for (auto& v : vars) out.push_back(values(v.value().to(Device::cpu())));
    for (auto& [k, t] : opt.state_dict(vars)) out.push_back(values(t.to(Device::cpu())));
    return out;
  };
  const auto before = state();
  cuda::reset_transfer_stats();
  opt.apply_gradients(bad, vars);
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 1u);
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(opt.scale(), 4.0);
  EXPECT_EQ(opt.iterations(), 1);
  auto after = state();
  EXPECT_EQ(before.size(), after.size());
  // Everything but the scale entries: "loss_scale" halved, "loss_scale_good_steps" 1 -> 0.
  int differing = 0;
  for (std::size_t i = 0; i < before.size() && i < after.size(); ++i) differing += before[i] != after[i];
  EXPECT_EQ(differing, 2);
  opt.apply_gradients(grads(std::nanf("")), vars);
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(opt.scale(), 2.0);
}

TEST(LossScale, F16FitOnADeviceGivesTheCpuWeights) {
  Tensor x = soma::testing::rand_tensor({64, 16}, 9, -1, 1, DType::f32);
  Tensor proj = soma::testing::rand_tensor({16, 4}, 10, -1, 1, DType::f32);
  Tensor y = cast(argmax(matmul(x, proj), -1), DType::i64);
  auto make = [] {
    set_seed(3);
    return nn::Sequential{nn::Input({16}), nn::Dense(8, nn::relu), nn::Dense(4)};
  };
  auto cpu = make();
  auto dev = make();
  soma::testing::EmulatedCuda gpu;
  dev.to(gpu.device());
  for (auto* m : {&cpu, &dev}) {
    m->compile(optim::Adam({.learning_rate = 1e-2}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.mixed_precision = "f16"});
    m->fit(x, y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0});
  }
  auto& ls = dynamic_cast<optim::LossScaleOptimizer&>(dev.optimizer());
  EXPECT_EQ(ls.iterations(), 8);
  EXPECT_EQ(ls.scale(), 32768.0);
  const auto pc = cpu.trainable_parameters(), pd = dev.trainable_parameters();
  ASSERT_EQ(pc.size(), pd.size());
  // On a device autocast really computes in f16 (the dispatcher lowers matmul's operands, issue
  // 23); the CPU has no f16 kernels and stays f32: the weights agree to f16's rounding.
  for (std::size_t i = 0; i < pc.size(); ++i)
    EXPECT_TRUE(soma::testing::all_close(pd[i].value().to(Device::cpu()), pc[i].value(), 2e-3, 2e-3)) << i;
}

// ---- compile(..., {.mixed_precision = "f16"}) ----

std::pair<Tensor, Tensor> task(std::int64_t n, std::uint64_t seed) {
  Tensor x = soma::testing::rand_tensor({n, 16}, seed, -1, 1, DType::f32);
  Tensor proj = soma::testing::rand_tensor({16, 4}, seed + 1, -1, 1, DType::f32);
  return {x, cast(argmax(matmul(x, proj), -1), DType::i64)};
}

nn::Sequential mlp() {
  set_seed(3);
  return nn::Sequential{nn::Input({16}), nn::Dense(32, nn::relu), nn::Dense(4)};
}

double train(nn::Sequential& m, const std::string& precision, const Tensor& x, const Tensor& y) {
  set_seed(7);
  m.compile(optim::Adam({.learning_rate = 1e-2}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
            {.mixed_precision = precision});
  m.fit(x, y, {.epochs = 8, .batch_size = 32, .verbose = 0});
  return m.evaluate(x, y, {.verbose = 0}).at("loss");
}

TEST(LossScale, CompileF16WrapsTheOptimizerAndTrainsToTheF32Loss) {
  const auto [x, y] = task(256, 5);
  auto m32 = mlp();
  const double f32 = train(m32, "", x, y);
  auto m16 = mlp();
  const double f16 = train(m16, "f16", x, y);
  auto* ls = dynamic_cast<optim::LossScaleOptimizer*>(&m16.optimizer());
  ASSERT_NE(ls, nullptr);
  EXPECT_EQ(ls->scale(), 32768.0);  // no overflow, no growth yet (64 steps < 2000)
  EXPECT_EQ(ls->good_steps(), 64);
  EXPECT_EQ(ls->iterations(), 64);
  EXPECT_LT(f32, 1.0);  // learned (chance: ln 4 = 1.39)
  // CPU f16 autocast computes in f32 (no f16 kernels), and power-of-two scaling is exact: the
  // scaled run must land on the f32 loss up to rounding of the scaled loss's backward pass.
  EXPECT_NEAR(f16, f32, 1e-3 * f32);
  // bf16 and f32 are not wrapped, as Keras.
  EXPECT_EQ(dynamic_cast<optim::LossScaleOptimizer*>(&m32.optimizer()), nullptr);
  auto mb = mlp();
  mb.compile(optim::SGD(), nn::MeanSquaredError(), {}, {.mixed_precision = "bf16"});
  EXPECT_EQ(dynamic_cast<optim::LossScaleOptimizer*>(&mb.optimizer()), nullptr);
}

TEST(LossScale, FitSkipsOverflowingStepsAndRecovers) {
  const auto [x, y] = task(256, 6);
  auto m = mlp();
  set_seed(7);
  // An explicit wrapper with a scale beyond f32's range: the scaled loss is inf, the first steps
  // are skipped.
  m.compile(optim::LossScaleOptimizer(optim::Adam({.learning_rate = 3e-3}),
                                      {.initial_scale = std::ldexp(1.0, 130)}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.mixed_precision = "f16"});
  const auto w0 = values(m.trainable_parameters()[0].value());
  m.train_on_batch(slice(x, {Slice{0, 32}}), slice(y, {Slice{0, 32}}));
  auto& ls = dynamic_cast<optim::LossScaleOptimizer&>(m.optimizer());
  EXPECT_TRUE(ls.last_step_skipped());
  EXPECT_EQ(ls.scale(), std::ldexp(1.0, 129));
  EXPECT_EQ(ls.iterations(), 0);
  EXPECT_EQ(values(m.trainable_parameters()[0].value()), w0);
  m.fit(x, y, {.epochs = 3, .batch_size = 32, .verbose = 0});
  EXPECT_LE(ls.scale(), std::ldexp(1.0, 127));
  EXPECT_GT(ls.iterations(), 0);
  for (auto& v : m.trainable_parameters())
    for (double e : values(v.value())) ASSERT_TRUE(std::isfinite(e));
  EXPECT_LT(m.evaluate(x, y, {.verbose = 0}).at("loss"), 1.2);
}

TEST(LossScale, F16ModelSavesAndLoadsWithItsScale) {
  const auto [x, y] = task(64, 8);
  auto m = mlp();
  m.compile(optim::LossScaleOptimizer(optim::Adam(), {.initial_scale = 64.0, .dynamic_growth_steps = 3}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.mixed_precision = "f16"});
  m.fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});  // 4 steps: one growth, 1 good
  auto& ls = dynamic_cast<optim::LossScaleOptimizer&>(m.optimizer());
  ASSERT_EQ(ls.scale(), 128.0);
  ASSERT_EQ(ls.good_steps(), 1);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("loss_scale_" + std::to_string(::getpid()) + ".soma")).string();
  m.save(path);
  auto back = load_model(path);
  std::filesystem::remove(path);
  auto* bl = dynamic_cast<optim::LossScaleOptimizer*>(&back->optimizer());
  ASSERT_NE(bl, nullptr);
  EXPECT_EQ(bl->scale(), 128.0);
  EXPECT_EQ(bl->good_steps(), 1);
  EXPECT_EQ(bl->iterations(), 4);
  EXPECT_EQ(bl->options().dynamic_growth_steps, 3);
}

}  // namespace
