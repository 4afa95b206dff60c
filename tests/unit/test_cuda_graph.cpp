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
  // The CPU stand-in of the tests does not (fit then trains eagerly).
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

}  // namespace
