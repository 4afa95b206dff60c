// Autocast on a device (issue 23): which ops run in bf16/f16 and which stay f32 is read from the
// op definitions (OpTag kAutocastLow / kAutocastF32, autocast_policy in soma/op.hpp), and the
// dispatcher lowers a kAutocastLow op's f32 inputs on a non-CPU device. Tested on the CPU
// stand-in device (tests/support/emulated_device.hpp), whose CUDA kernels are the CPU kernels:
// the same path a GPU takes, with the CPU's bf16/f16 kernels doing the low-precision work.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../../src/ops/autocast_cache.hpp"
#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

Tensor host(const Tensor& t) { return t.to(Device::cpu()); }
double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(cast(host(a), DType::f64) - cast(host(b), DType::f64))).item<double>();
}

// ---- the policy, from the definitions ----

TEST(AutocastPolicy, MatrixWorkRunsLowAndReductionsSoftmaxUpdatesStayF32) {
  const std::set<std::string> low = {"matmul",       "dense_bias_act",         "conv2d",
                                     "conv2d_bias_act", "conv2d_backprop_input", "conv2d_backprop_filter",
                                     "scaled_dot_product_attention"};
  const std::set<std::string> f32 = {"softmax", "log_softmax", "sum",         "mean",
                                     "prod",    "max",         "min",         "sgd_update",
                                     "adam_update", "nadam_update", "rmsprop_update", "adagrad_update"};
  for (const auto& n : low) EXPECT_EQ(autocast_policy(get_op(n)), AutocastPolicy::kLow) << n;
  for (const auto& n : f32) EXPECT_EQ(autocast_policy(get_op(n)), AutocastPolicy::kF32) << n;
  for (const OpDef* d : all_ops()) {
    // No op says both; every reduction and every optimiser update says f32 (a new one must too).
    EXPECT_FALSE(d->has(kAutocastLow) && d->has(kAutocastF32)) << d->name;
    if (d->has(kReduction) || d->has(kInplace)) {
      EXPECT_EQ(autocast_policy(*d), AutocastPolicy::kF32) << d->name;
    }
    // Low precision only for the listed matrix/convolution ops: elementwise ops follow their
    // inputs (f32 under autocast, since the low ops' outputs are f32).
    if (!low.count(d->name)) {
      EXPECT_NE(autocast_policy(*d), AutocastPolicy::kLow) << d->name;
    }
  }
  EXPECT_EQ(autocast_dtype_for(get_op("matmul"), DType::bf16), DType::bf16);
  EXPECT_EQ(autocast_dtype_for(get_op("softmax"), DType::bf16), DType::f32);
  EXPECT_EQ(autocast_dtype_for(get_op("add"), DType::f16), DType::f32);
  EXPECT_EQ(autocast_dtype_for(get_op("matmul"), DType::f32), DType::f32);
}

// ---- single ops on the stand-in device ----

TEST(AutocastDevice, MatmulRunsOnLowCopiesAndReturnsF32) {
  soma::testing::EmulatedCuda gpu;
  const Tensor a = rand_tensor({16, 24}, 1, -1, 1, DType::f32), b = rand_tensor({24, 8}, 2, -1, 1, DType::f32);
  const Tensor full = matmul(a, b);
  for (DType low : {DType::bf16, DType::f16}) {
    AutocastScope scope(low);
    const Tensor y = matmul(a.to(gpu.device()), b.to(gpu.device()));
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(y.device(), gpu.device());
    // Exactly the op on rounded operands, its output rounded to `low` (as a GPU library writes
    // a low-precision output), then widened.
    AutocastScope off(DType::f32);
    const Tensor want = cast(matmul(cast(a, low), cast(b, low)), DType::f32);
    EXPECT_EQ(max_diff(y, want), 0.0) << dtype_name(low);
    EXPECT_GT(max_diff(y, full), 0.0) << dtype_name(low);                // it was lowered
    EXPECT_LT(max_diff(y, full), low == DType::bf16 ? 0.2 : 0.02) << dtype_name(low);
  }
}

TEST(AutocastDevice, F32OpsAndF64AreUntouched) {
  soma::testing::EmulatedCuda gpu;
  const Tensor x = rand_tensor({8, 10}, 3, -3, 3, DType::f32);
  const Tensor s32 = softmax(x, -1), m32 = mean(x);
  const Tensor a64 = rand_tensor({5, 6}, 4), b64 = rand_tensor({6, 3}, 5);
  AutocastScope scope(DType::bf16);
  const Tensor xd = x.to(gpu.device());
  EXPECT_EQ(max_diff(softmax(xd, -1), s32), 0.0);
  EXPECT_EQ(max_diff(mean(xd), m32), 0.0);
  EXPECT_EQ(max_diff(exp(xd), exp(x)), 0.0);
  const Tensor y64 = matmul(a64.to(gpu.device()), b64.to(gpu.device()));
  EXPECT_EQ(y64.dtype(), DType::f64);
  EXPECT_EQ(max_diff(y64, matmul(a64, b64)), 0.0);
}

TEST(AutocastDevice, GradientsAreF32AndComeFromLoweredOps) {
  soma::testing::EmulatedCuda gpu;
  const Tensor x = rand_tensor({4, 6}, 6, -1, 1, DType::f32);
  Variable w(rand_tensor({6, 3}, 7, -1, 1, DType::f32).to(gpu.device()));
  AutocastScope scope(DType::bf16);
  GradientTape tape;
  const Tensor loss = sum(square(matmul(x.to(gpu.device()), w.value())));
  const Tensor g = tape.gradient(loss, {w})[0];
  EXPECT_EQ(g.dtype(), DType::f32);
  EXPECT_EQ(w.value().dtype(), DType::f32);  // master weights stay f32
  // The f32 gradient 2 x^T (x w), within bf16 rounding.
  AutocastScope off(DType::f32);
  const Tensor xw = matmul(x, host(w.value()));
  const Tensor want = matmul(transpose(x, {1, 0}), xw * 2.0);
  EXPECT_TRUE(all_close(host(g), want, 0.1, 0.05));
  EXPECT_GT(max_diff(g, want), 0.0);
}

TEST(AutocastDevice, ConvolutionRunsLow) {
  soma::testing::EmulatedCuda gpu;
  const Tensor x = rand_tensor({2, 3, 6, 6}, 8, -1, 1, DType::f32);
  const Tensor w = rand_tensor({4, 3, 3, 3}, 9, -1, 1, DType::f32);
  const Tensor full = conv2d(x, w, 1, "same");
  AutocastScope scope(DType::bf16);
  const Tensor y = conv2d(x.to(gpu.device()), w.to(gpu.device()), 1, "same");
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_GT(max_diff(y, full), 0.0);
  EXPECT_LT(max_diff(y, full), 0.2);
}

// ---- training: compile(..., {.mixed_precision = "bf16"}) on a device ----

Ref<nn::Model> cnn() {
  set_seed(5);
  return std::make_shared<nn::Sequential>(
      nn::Input({3, 8, 8}), nn::Conv2D(8, 3, {.padding = "same", .activation = nn::relu}),
      nn::MaxPool2D(2), nn::Flatten(), nn::Dense(16, nn::relu), nn::Dense(3));
}
Ref<nn::Model> mlp() {
  set_seed(6);
  return soma::testing::small_mlp();
}

struct Trained {
  double loss;
  Ref<nn::Model> model;
};
Trained train(soma::testing::ModelFactory make, const Shape& sample, const std::string& precision,
              std::optional<Device> device) {
  // A learnable task: the label is the argmax of a fixed linear map of the input.
  std::int64_t d = 1;
  for (auto v : sample) d *= v;
  Shape xs{96};
  xs.insert(xs.end(), sample.begin(), sample.end());
  const Tensor x = rand_tensor(xs, 11, -1, 1, DType::f32);
  const Tensor proj = rand_tensor({d, 3}, 12, -1, 1, DType::f32);
  const struct {
    Tensor x, y;
  } data{x, cast(argmax(matmul(reshape(x, {96, d}), proj), -1), DType::i64)};
  Ref<nn::Model> m = make();
  if (device) m->to(*device);
  m->compile(optim::Adam({.learning_rate = 1e-2}),
             nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
             {.mixed_precision = precision});
  m->fit(data.x, data.y, {.epochs = 6, .batch_size = 16, .shuffle = false, .verbose = 0});
  return {m->evaluate(data.x, data.y, {.verbose = 0}).at("loss"), m};
}

void device_bf16_matches_cpu_bf16(soma::testing::ModelFactory make, const Shape& sample) {
  const int threads = get_num_threads();
  set_num_threads(1);
  const Trained f32_cpu = train(make, sample, "", std::nullopt);
  const Trained bf16_cpu = train(make, sample, "bf16", std::nullopt);
  soma::testing::EmulatedCuda gpu;
  const Trained bf16_dev = train(make, sample, "bf16", gpu.device());
  const Trained f32_dev = train(make, sample, "", gpu.device());
  set_num_threads(threads);
  // It learned (chance is ln 3 = 1.10), in bf16 as in f32.
  EXPECT_LT(f32_cpu.loss, 0.7);
  EXPECT_LT(bf16_dev.loss, 0.7);
  // The device's bf16 run is the CPU's bf16 run within bf16 rounding (the CPU rounds operands
  // only; the device path also rounds each product's output), and not the f32 run.
  EXPECT_NEAR(bf16_dev.loss, bf16_cpu.loss, 0.03 + 0.05 * bf16_cpu.loss);
  EXPECT_NEAR(bf16_dev.loss, f32_cpu.loss, 0.05 + 0.1 * f32_cpu.loss);
  EXPECT_NE(bf16_dev.loss, f32_dev.loss);
  // Weights: loosely (Adam divides by sqrt(v), so a weight with tiny gradients moves by about
  // the learning rate whatever their rounding; bf16 flips some of those steps).
  EXPECT_TRUE(soma::testing::same_weights(*bf16_cpu.model, *bf16_dev.model, 0.15));
  // The device's f32 run is the CPU's (the autocast path is not taken without a scope).
  EXPECT_TRUE(soma::testing::same_weights(*f32_cpu.model, *f32_dev.model, 1e-5));
  for (const auto& p : bf16_dev.model->parameters()) {
    EXPECT_EQ(p.value().dtype(), DType::f32);  // f32 master weights
    EXPECT_EQ(p.value().device(), gpu.device());
  }
}

// The weight cast cache (src/ops/autocast_cache.hpp): the backward's transposed view of a weight
// reuses the forward's cast (a hit), an optimiser step (a new version) casts again, and training
// gives the same numbers as casting per op.
TEST(AutocastDevice, AWeightIsCastOncePerVersion) {
  soma::testing::EmulatedCuda gpu;
  const Tensor x = rand_tensor({4, 6}, 6, -1, 1, DType::f32).to(gpu.device());
  Variable w(rand_tensor({6, 3}, 7, -1, 1, DType::f32).to(gpu.device()));
  AutocastScope scope(DType::bf16);
  auto& st = detail::autocast_cache_stats();
  auto grad = [&] {
    GradientTape tape;
    const Tensor h = matmul(x, w.value());
    return tape.gradient(sum(square(matmul(h, transpose(w.value(), {1, 0})))), {w})[0];
  };
  st = {};
  const Tensor g1 = grad();
  EXPECT_EQ(st.misses, 1);  // one cast of w's storage
  EXPECT_EQ(st.hits, 2);    // the second forward use (a view) and the backward's dh = g w
  w.assign(w.value() * 0.5);  // a new version
  st = {};
  const Tensor g2 = grad();
  EXPECT_EQ(st.misses, 1);
  // The same values as without the cache.
  detail::set_autocast_weight_cache(false);
  const Tensor g3 = grad();
  detail::set_autocast_weight_cache(true);
  EXPECT_TRUE(all_close(host(g2), host(g3), 0.0, 0.0));
  EXPECT_FALSE(all_close(host(g1), host(g2), 1e-3, 1e-3));
}

TEST(AutocastDevice, TrainingWithTheCastCacheEqualsCastingPerOp) {
  soma::testing::EmulatedCuda gpu;
  auto run = [&](bool cache) {
    detail::set_autocast_weight_cache(cache);
    const Trained t = train(mlp, {6}, "bf16", gpu.device());
    detail::set_autocast_weight_cache(true);
    return t;
  };
  const Trained on = run(true), off = run(false);
  EXPECT_EQ(on.loss, off.loss);
  const auto a = on.model->parameters(), b = off.model->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(all_close(host(a[i].value()), host(b[i].value()), 0.0, 0.0)) << i;
}

TEST(AutocastDevice, MlpUnderBf16OnTheDeviceMatchesCpuAutocast) {
  device_bf16_matches_cpu_bf16(mlp, {6});
}

TEST(AutocastDevice, CnnUnderBf16OnTheDeviceMatchesCpuAutocast) {
  device_bf16_matches_cpu_bf16(cnn, {3, 8, 8});
}

}  // namespace
