// Graph mode on a device (soma::function, Session, compile's jit), tested against the CPU
// stand-in of tests/support/emulated_device.hpp: placeholders fed with device tensors, captured
// variables on the device, every node dispatched there, outputs returned there.
#include <gtest/gtest.h>

#include <vector>

#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

using soma::testing::same_weights;
using soma::testing::small_mlp;
using Data = soma::testing::ClassData;
Data make_data(std::int64_t n, std::uint64_t seed) { return soma::testing::class_data({6}, n, seed); }
std::pair<Ref<nn::Model>, Ref<nn::Model>> twin_models() {
  return soma::testing::twin_models(small_mlp);
}

}  // namespace

TEST(DeviceGraph, FunctionRunsOnItsInputsDevice) {
  soma::testing::EmulatedCuda gpu;
  Tensor wh = soma::testing::rand_tensor({4, 3}, 1).cast(DType::f32);
  Variable w(wh.to(gpu.device()));
  Variable wc(wh);
  auto make = [](Variable& v) {
    return soma::function([&v](const std::vector<Tensor>& in) {
      GradientTape tape;
      // An elementwise chain (fused on the CPU) and a reduction.
      Tensor h = tanh(matmul(in[0], v.value()) * 2.0 + 1.0);
      Tensor loss = mean(square(h - in[1]));
      return std::vector<Tensor>{loss, h, tape.gradient(loss, v)};
    });
  };
  Function fd = make(w), fc = make(wc);
  Tensor x = soma::testing::rand_tensor({5, 4}, 2).cast(DType::f32);
  Tensor y = soma::testing::rand_tensor({5, 3}, 3).cast(DType::f32);
  Tensor xd = x.to(gpu.device()), yd = y.to(gpu.device());
  std::vector<Tensor> want = fc({x, y});
  for (int call = 0; call < 3; ++call) {  // the first call traces, the others run the plan
    cuda::reset_transfer_stats();
    std::vector<Tensor> got = fd({xd, yd});
    EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 0u) << "call " << call;
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].device(), gpu.device()) << "output " << i;
      EXPECT_TRUE(soma::testing::all_close(got[i].to(Device::cpu()), want[i], 1e-6, 1e-6))
          << "output " << i;
    }
  }
  EXPECT_EQ(fd.num_traces(), 1u);
  EXPECT_EQ(fd.last_stats().fused_nodes, 0);  // no host loops over device memory
  EXPECT_GT(fc.last_stats().fused_nodes, 0);
  // The same function fed host tensors traces again and runs on the CPU.
  Function fh = make(wc);
  EXPECT_TRUE(fh({x, y})[0].device().is_cpu());
}

TEST(DeviceGraph, SessionTakesDeviceFeeds) {
  soma::testing::EmulatedCuda gpu;
  Graph g;
  Tensor x, out;
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f32, {-1, 2}, "x");
    out = sum(exp(x) + x * 3.0, {1});
  }
  Session s(g);
  Tensor xh = constant(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor want = s.run(out, {{x, xh}});
  Tensor got = s.run(out, {{x, xh.to(gpu.device())}});
  EXPECT_EQ(got.device(), gpu.device());
  EXPECT_TRUE(soma::testing::all_close(got.to(Device::cpu()), want, 1e-6, 1e-6));
  // Feeds on two devices are refused.
  Graph g2;
  Tensor a, b, c;
  {
    GraphScope scope(g2);
    a = g2.placeholder(DType::f32, {2}, "a");
    b = g2.placeholder(DType::f32, {2}, "b");
    c = a + b;
  }
  Session s2(g2);
  Tensor v = constant(std::vector<float>{1, 2}, {2});
  EXPECT_THROW(s2.run(c, {{a, v}, {b, v.to(gpu.device())}}), Error);
}

TEST(DeviceGraph, JitFitOnTheDeviceGivesTheEagerCpuWeights) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models();
  dev->to(gpu.device());
  Data d = make_data(40, 11);
  cpu->compile(optim::Adam({.learning_rate = 1e-2}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  dev->compile(optim::Adam({.learning_rate = 1e-2}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"},
               {.jit = true});
  model::FitOptions fo{.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0};
  auto hc = cpu->fit(d.x, d.y, fo);
  auto hd = dev->fit(d.x, d.y, fo);
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  for (const char* k : {"loss", "accuracy"})
    for (std::size_t e = 0; e < 3; ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), hc.history.at(k).at(e), 1e-6) << k << " epoch " << e;
  for (auto& v : dev->parameters()) EXPECT_EQ(v.value().device(), gpu.device()) << v.name();
}

TEST(DeviceGraph, AJitStepCopiesItsBatchInAndNothingOut) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile(optim::Adam({.learning_rate = 1e-3}),
                 nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"},
                 {.jit = true});
  Data d = make_data(64, 2);
  // First steps: the eager step, then the trace (both with batches of 16).
  model->fit(d.x.slice(0, 0, 32), d.y.slice(0, 0, 32),
             {.epochs = 1, .batch_size = 16, .verbose = 0});
  std::vector<cuda::TransferStats> at_batch_begin;
  auto probe = std::make_shared<callbacks::LambdaCallback>();
  probe->on_train_batch_begin_fn = [&](std::int64_t, model::Logs&) {
    at_batch_begin.push_back(cuda::transfer_stats());
  };
  cuda::reset_transfer_stats();
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .callbacks = {probe}, .verbose = 0});
  const auto end = cuda::transfer_stats();
  ASSERT_EQ(at_batch_begin.size(), 4u);
  const std::uint64_t batch_bytes = 16 * 6 * 4 + 16 * 8;  // x f32, y i64
  for (std::size_t i = 1; i < at_batch_begin.size(); ++i) {
    const auto &now = at_batch_begin[i], &before = at_batch_begin[i - 1];
    EXPECT_EQ(now.host_to_device_copies - before.host_to_device_copies, 2u) << "step " << i - 1;
    EXPECT_EQ(now.host_to_device_bytes - before.host_to_device_bytes, batch_bytes);
    EXPECT_EQ(now.device_to_host_copies, 0u) << "a read back inside the epoch";
  }
  // At the epoch's end: the loss sum and the accuracy's sum, one read each.
  EXPECT_EQ(end.device_to_host_copies, 2u);
}

TEST(DeviceGraph, JitDropoutDrawsTheCpuMasksOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  auto make = []() -> Ref<nn::Model> {
    return std::make_shared<nn::Sequential>(nn::Input({6}), nn::Dense(16, nn::relu),
                                            nn::Dropout(0.5), nn::Dense(3));
  };
  Ref<nn::Model> cpu = make(), dev = make();
  auto pa = cpu->parameters(), pb = dev->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) pb[i].assign(pa[i].value());
  dev->to(gpu.device());
  Data d = make_data(32, 13);
  for (auto* m : {&cpu, &dev})
    (*m)->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
                  {.jit = true});
  set_seed(21);
  cpu->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  set_seed(21);
  dev->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
}

// ---- the same on a real GPU (skips when none is usable; not run where this was written) ------

TEST(GpuGraph, JitFitOnTheGpuGivesTheEagerCpuWeights) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  const bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  auto [cpu, dev] = twin_models();
  dev->to(Device::cuda(0));
  Data d = make_data(40, 11);
  cpu->compile(optim::Adam({.learning_rate = 1e-2}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}));
  dev->compile(optim::Adam({.learning_rate = 1e-2}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.jit = true});
  model::FitOptions fo{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  auto hc = cpu->fit(d.x, d.y, fo);
  cuda::reset_transfer_stats();
  auto hd = dev->fit(d.x, d.y, fo);
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 2u);  // the loss, once per epoch
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-4));
  EXPECT_NEAR(hd.history.at("loss").back(), hc.history.at("loss").back(), 1e-4);
  cuda::set_allow_tf32(tf32);
}
