// CUDA graph capture in the backend (issue 23; core/device_backend.hpp begin_capture ...
// destroy_graph, src/backend/cuda/runtime.cpp): ops queued on soma's stream are captured,
// replayed with new inputs written into the captured input buffers, and give what eager
// execution gives; memory allocated during the capture stays reserved for the graph. Needs a
// GPU (skips without one); the decision of when fit would capture is test_step_graph.cpp's.
#include <gtest/gtest.h>

#include "../../src/core/device_backend.hpp"
#include "soma/cuda.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);

struct FullF32 {  // TF32 off: comparable to the CPU at f32 precision
  bool was = cuda::allow_tf32();
  FullF32() { cuda::set_allow_tf32(false); }
  ~FullF32() { cuda::set_allow_tf32(was); }
};

TEST(CudaGraph, TheBackendOffersCapture) {
  if (!cuda::is_built()) GTEST_SKIP() << "built without CUDA";
  EXPECT_TRUE(detail::has_graph_capture(detail::device_backend(DeviceKind::CUDA)));
  // The plain CPU stand-in of the tests does not (tests/support/emulated_capture.hpp adds one).
  EXPECT_FALSE(detail::has_graph_capture(detail::emulated_device_backend()));
}

TEST(CudaGraph, ReplaysOpsOnNewInputs) {
  SKIP_WITHOUT_GPU();
  FullF32 full;
  const detail::DeviceBackend* be = detail::device_backend(DeviceKind::CUDA);
  Variable x(rand_tensor({8, 16}, 1, -1, 1, DType::f32).to(kGpu));
  const Tensor w = rand_tensor({16, 4}, 2, -1, 1, DType::f32);
  const Tensor wd = w.to(kGpu);
  cuda::synchronize();
  be->begin_capture(0);
  Tensor y = relu(matmul(x.value(), wd) * 2.0 + 1.0);  // temporaries freed inside the capture
  std::string why;
  void* graph = be->end_capture(0, &why);
  ASSERT_NE(graph, nullptr) << why;
  for (std::uint64_t seed = 10; seed < 13; ++seed) {
    const Tensor xs = rand_tensor({8, 16}, seed, -1, 1, DType::f32);
    x.assign(xs.to(kGpu));  // into the captured input buffer
    be->launch_graph(graph, 0);
    EXPECT_TRUE(all_close(y.to(Device::cpu()), relu(matmul(xs, w) * 2.0 + 1.0), 1e-5, 1e-5)) << seed;
  }
  // Allocations after the capture do not get the graph's blocks while it lives.
  const Tensor other = zeros({8, 4}, DType::f32).to(kGpu);
  EXPECT_NE(other.raw_data(), y.raw_data());
  be->launch_graph(graph, 0);
  EXPECT_TRUE(all_close(other.to(Device::cpu()), zeros({8, 4}, DType::f32)));
  be->destroy_graph(graph, 0);
}

TEST(CudaGraph, ASgdStepReplaysLikeEagerSteps) {
  SKIP_WITHOUT_GPU();
  FullF32 full;
  const detail::DeviceBackend* be = detail::device_backend(DeviceKind::CUDA);
  const Tensor w0 = rand_tensor({16, 4}, 3, -1, 1, DType::f32);
  auto batch = [](int i) {
    return std::pair{rand_tensor({32, 16}, 100 + std::uint64_t(i), -1, 1, DType::f32),
                     rand_tensor({32, 4}, 200 + std::uint64_t(i), -1, 1, DType::f32)};
  };
  auto step = [](optim::SGD& opt, Variable& w, const Tensor& x, const Tensor& t) {
    GradientTape tape;
    const Tensor loss = mean(square(matmul(x, w.value()) - t));
    opt.apply_gradients(tape.gradient(loss, {w}), {w});
  };
  // Eager on the CPU: 6 steps.
  Variable wc(w0.clone());
  optim::SGD oc({.learning_rate = 0.1});
  for (int i = 0; i < 6; ++i) step(oc, wc, batch(i).first, batch(i).second);
  // On the GPU: one eager step (makes the state), one captured, then replays.
  Variable wg(w0.to(kGpu));
  optim::SGD og({.learning_rate = 0.1});
  Variable xg(batch(0).first.to(kGpu)), tg(batch(0).second.to(kGpu));
  step(og, wg, xg.value(), tg.value());
  xg.assign(batch(1).first.to(kGpu));
  tg.assign(batch(1).second.to(kGpu));
  cuda::synchronize();
  be->begin_capture(0);
  step(og, wg, xg.value(), tg.value());
  std::string why;
  void* graph = be->end_capture(0, &why);
  ASSERT_NE(graph, nullptr) << why;
  be->launch_graph(graph, 0);  // the captured step did not run: this is step 1
  for (int i = 2; i < 6; ++i) {
    xg.assign(batch(i).first.to(kGpu));
    tg.assign(batch(i).second.to(kGpu));
    be->launch_graph(graph, 0);
  }
  EXPECT_TRUE(all_close(wg.value().to(Device::cpu()), wc.value(), 1e-5, 1e-5));
  be->destroy_graph(graph, 0);
}

// fit itself (FitOptions::cuda_graph): an MLP with AdamW on a decaying rate (every per-step
// scalar changes) and accuracy, 130 samples in batches of 16 (a short last batch), 3 epochs:
// on and off give the same weights and history (the same kernels in the same order: equal to
// rounding, bit for bit where the GPU's reductions are deterministic), and most steps replay.
// The CPU stand-in's emulated capture checks the same in test_fit_cuda_graph.cpp.
TEST(CudaGraph, FitReplaysItsStepsLikeEagerSteps) {
  SKIP_WITHOUT_GPU();
  FullF32 full;
  const Tensor x = rand_tensor({130, 6}, 11, -1, 1, DType::f32);
  std::vector<std::int64_t> labels(130);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int64_t(i * 7 % 3);
  const Tensor y = constant(labels, {130});
  auto train = [&](bool graph) {
    set_seed(5);
    auto m = std::make_shared<nn::Sequential>(nn::Input({6}), nn::Dense(16, nn::relu),
                                              nn::Dense(8, nn::tanh), nn::Dense(3));
    m->to(kGpu);
    m->compile(optim::AdamW({.learning_rate = optim::ExponentialDecay(
                                 {.initial_learning_rate = 0.01, .decay_steps = 3,
                                  .decay_rate = 0.9}),
                             .weight_decay = 0.01}),
               nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    nn::History h = m->fit(x, y, {.epochs = 3, .batch_size = 16, .shuffle = false, .verbose = 0,
                              .cuda_graph = graph});
    return std::pair{m, h};
  };
  auto [off, h_off] = train(false);
  auto [on, h_on] = train(true);
  const auto& st = on->step_graph_stats();
  EXPECT_EQ(st.captures, 3) << st.reason;
  EXPECT_EQ(st.replays, 12) << st.reason;
  auto pa = off->parameters(), pb = on->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(all_close(pb[i].value().to(Device::cpu()), pa[i].value().to(Device::cpu()), 1e-6,
                          1e-6))
        << i;
  for (const auto& [k, v] : h_off.history)
    for (std::size_t e = 0; e < v.size(); ++e) EXPECT_NEAR(h_on[k][e], v[e], 1e-6) << k << e;
}

}  // namespace
