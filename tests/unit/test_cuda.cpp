// The CUDA backend: the runtime API in every build (built or not, device or not), and on a GPU
// every CUDA kernel against the CPU result. Device tests skip with the reason when no GPU is
// usable (docs/cuda.md: how to run them on a GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "soma/cuda.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

using soma::testing::error_of;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);

Tensor rand_f32(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return rand_tensor(s, seed, lo, hi, DType::f32);
}

// CUDA result brought back to the host.
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

}  // namespace

// ---- everywhere --------------------------------------------------------------------------------
TEST(CudaRuntime, IsBuiltMatchesTheRegisteredKernels) {
  const bool has_kernel = get_op("add").kernels[int(DeviceKind::CUDA)] != nullptr;
  EXPECT_EQ(cuda::is_built(), has_kernel);
  if (!cuda::is_built()) {
    EXPECT_FALSE(cuda::is_available());
    EXPECT_NE(cuda::unavailable_reason().find("built without CUDA"), std::string::npos);
  }
}

TEST(CudaRuntime, AvailabilityAndReasonAgree) {
  EXPECT_EQ(cuda::is_available(), cuda::device_count() > 0);
  EXPECT_EQ(cuda::is_available(), cuda::unavailable_reason().empty())
      << cuda::unavailable_reason();
}

TEST(CudaRuntime, WithoutADeviceMovingATensorThereIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available: the no-GPU path is not taken";
  std::string m = error_of([] { constant({1.0f, 2.0f}).to(kGpu); });
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("not available"), std::string::npos) << m;
  EXPECT_NE(m.find(cuda::unavailable_reason()), std::string::npos) << m;
  std::string e = error_of([] { Tensor::empty({4}, DType::f32, kGpu); });
  EXPECT_NE(e.find("not available"), std::string::npos) << e;
}

TEST(CudaRuntime, WithoutADeviceStatsAreZeroAndHousekeepingIsANoOp) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available";
  cuda::MemoryStats s = cuda::memory_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.num_allocs, 0u);
  EXPECT_NO_THROW(cuda::synchronize());
  EXPECT_NO_THROW(cuda::empty_cache());
  cuda::Event ev;
  std::string m = error_of([&] { ev.record(); });
  EXPECT_NE(m.find("cuda::Event"), std::string::npos) << m;
}

TEST(CudaRuntime, Tf32SwitchDefaultsOnAndToggles) {
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
}

// ---- on a GPU: elementwise ---------------------------------------------------------------------
struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;
};
class CudaUnary : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(CudaUnary, MatchesTheCpuOnContiguousAndStridedInputs) {
  SKIP_WITHOUT_GPU();
  const UnaryCase& c = GetParam();
  Tensor x = rand_f32({6, 33}, 1, c.lo, c.hi);
  EXPECT_TRUE(all_close(host(c.fn(x.to(kGpu))), c.fn(x), 1e-6, 1e-5)) << c.name;
  Tensor xt = x.transpose();  // a strided view on both devices
  EXPECT_TRUE(all_close(host(c.fn(x.to(kGpu).transpose())), c.fn(xt), 1e-6, 1e-5)) << c.name;
  Tensor xd = rand_tensor({5, 7}, 2, c.lo, c.hi, DType::f64);
  EXPECT_TRUE(all_close(host(c.fn(xd.to(kGpu))), c.fn(xd), 1e-12, 1e-10)) << c.name << " f64";
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CudaUnary,
    ::testing::Values(UnaryCase{"negative", negative, -2, 2}, UnaryCase{"abs", abs, -2, 2},
                      UnaryCase{"exp", exp, -3, 3}, UnaryCase{"log", log, 0.1, 4},
                      UnaryCase{"sqrt", sqrt, 0.0, 4}, UnaryCase{"relu", relu, -1, 1},
                      UnaryCase{"sigmoid", sigmoid, -8, 8}, UnaryCase{"tanh", tanh, -3, 3},
                      UnaryCase{"square", square, -2, 2}),
    [](const ::testing::TestParamInfo<UnaryCase>& i) { return std::string(i.param.name); });

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double lo, hi;
};
class CudaBinary : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(CudaBinary, MatchesTheCpuWithBroadcastingAndViews) {
  SKIP_WITHOUT_GPU();
  const BinaryCase& c = GetParam();
  Tensor a = rand_f32({3, 1, 5}, 3, c.lo, c.hi), b = rand_f32({4, 5}, 4, c.lo, c.hi);
  Tensor want = c.fn(a, b);
  Tensor got = host(c.fn(a.to(kGpu), b.to(kGpu)));
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_TRUE(all_close(got.cast(DType::f64), want.cast(DType::f64), 1e-6, 1e-5)) << c.name;
  // A transposed operand and a scalar operand.
  Tensor m = rand_f32({5, 4}, 5, c.lo, c.hi);
  EXPECT_TRUE(all_close(host(c.fn(m.to(kGpu).transpose(), b.to(kGpu))).cast(DType::f64),
                        c.fn(m.transpose(), b).cast(DType::f64), 1e-6, 1e-5))
      << c.name;
  Tensor s = rand_f32({}, 6, c.lo, c.hi);
  EXPECT_TRUE(all_close(host(c.fn(b.to(kGpu), s.to(kGpu))).cast(DType::f64),
                        c.fn(b, s).cast(DType::f64), 1e-6, 1e-5))
      << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CudaBinary,
    ::testing::Values(BinaryCase{"add", add, -2, 2}, BinaryCase{"subtract", subtract, -2, 2},
                      BinaryCase{"multiply", multiply, -2, 2},
                      BinaryCase{"divide", divide, 0.5, 2}, BinaryCase{"maximum", maximum, -2, 2},
                      BinaryCase{"minimum", minimum, -2, 2}, BinaryCase{"pow", pow, 0.5, 2},
                      BinaryCase{"less", less, -2, 2}, BinaryCase{"equal", equal, -1, 1},
                      BinaryCase{"greater_equal", greater_equal, -2, 2}),
    [](const ::testing::TestParamInfo<BinaryCase>& i) { return std::string(i.param.name); });

TEST(CudaOps, WhereSelectsLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor c = rand_f32({4, 5}, 7) > 0.0, a = rand_f32({4, 5}, 8), b = rand_f32({5}, 9);
  EXPECT_TRUE(all_close(host(where(c.to(kGpu), a.to(kGpu), b.to(kGpu))), where(c, a, b), 0, 0));
}

TEST(CudaOps, CopiesAndCastsRoundTripExactly) {
  SKIP_WITHOUT_GPU();
  Tensor i = constant<std::int64_t>({(std::int64_t(1) << 60) + 3, -5, 7});
  EXPECT_EQ(host(i.to(kGpu)).to_vector<std::int64_t>(), i.to_vector<std::int64_t>());
  Tensor x = rand_f32({3, 4}, 10, -100, 100);
  EXPECT_TRUE(all_close(host(x.to(kGpu).cast(DType::i32)), x.cast(DType::i32), 0, 0));
  EXPECT_TRUE(all_close(host(x.to(kGpu).cast(DType::f16)).cast(DType::f32),
                        x.cast(DType::f16).cast(DType::f32), 0, 0));
  EXPECT_TRUE(all_close(host(x.to(kGpu).cast(DType::bf16)).cast(DType::f32),
                        x.cast(DType::bf16).cast(DType::f32), 0, 0));
  Tensor v = x.transpose().to(kGpu);  // a non-contiguous source is packed first
  EXPECT_TRUE(all_close(host(v), x.transpose(), 0, 0));
  EXPECT_TRUE(all_close(host(x.to(kGpu).transpose().contiguous()), x.transpose(), 0, 0));
  EXPECT_TRUE(all_close(host(zeros_like(x.to(kGpu))), zeros_like(x), 0, 0));
  EXPECT_TRUE(all_close(host(full_like(x.to(kGpu), 2.5)), full_like(x, 2.5), 0, 0));
}

TEST(CudaOps, ReductionsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_f32({4, 70, 3}, 11);
  Tensor g = x.to(kGpu);
  for (Axes ax : {Axes{}, Axes{0}, Axes{1}, Axes{2}, Axes{0, 2}, Axes{-1, 1}}) {
    for (bool keep : {false, true}) {
      EXPECT_TRUE(all_close(host(sum(g, ax, keep)), sum(x, ax, keep), 1e-5, 1e-5));
      EXPECT_TRUE(all_close(host(mean(g, ax, keep)), mean(x, ax, keep), 1e-6, 1e-5));
      EXPECT_TRUE(all_close(host(max(g, ax, keep)), max(x, ax, keep), 0, 0));
      EXPECT_TRUE(all_close(host(min(g, ax, keep)), min(x, ax, keep), 0, 0));
    }
  }
  Tensor big = rand_f32({3, 5000}, 12);  // the block-per-row path
  EXPECT_TRUE(all_close(host(sum(big.to(kGpu), {1})), sum(big, {1}), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(host(sum(big.to(kGpu).transpose(), {0})), sum(big, {1}), 1e-4, 1e-5));
}

TEST(CudaOps, SoftmaxAndLogSoftmaxMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_f32({8, 10}, 13, -5, 5);
  EXPECT_TRUE(all_close(host(softmax(x.to(kGpu))), softmax(x), 1e-6, 1e-5));
  EXPECT_TRUE(all_close(host(log_softmax(x.to(kGpu))), log_softmax(x), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(host(softmax(x.to(kGpu), 0)), softmax(x, 0), 1e-6, 1e-5));
  Tensor wide = rand_f32({2, 3000}, 14, -5, 5);
  EXPECT_TRUE(all_close(host(log_softmax(wide.to(kGpu))), log_softmax(wide), 1e-5, 1e-5));
}

// ---- matmul ------------------------------------------------------------------------------------
TEST(CudaMatmul, Tf32AndFullF32MatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = rand_f32({33, 64}, 15), b = rand_f32({64, 17}, 16);
  Tensor want = matmul(a, b);
  EXPECT_TRUE(all_close(host(matmul(a.to(kGpu), b.to(kGpu))), want, 1e-3, 1e-3));  // TF32
  cuda::set_allow_tf32(false);
  Tensor full = host(matmul(a.to(kGpu), b.to(kGpu)));
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(all_close(full, want, 1e-5, 1e-5));
  Tensor ad = rand_tensor({9, 5}, 17), bd = rand_tensor({5, 4}, 18);
  EXPECT_TRUE(all_close(host(matmul(ad.to(kGpu), bd.to(kGpu))), matmul(ad, bd), 1e-12, 1e-12));
}

TEST(CudaMatmul, TransposedViewsBatchesAndVectors) {
  SKIP_WITHOUT_GPU();
  cuda::set_allow_tf32(false);
  Tensor a = rand_f32({2, 3, 8, 6}, 19), b = rand_f32({3, 6, 5}, 20);
  EXPECT_TRUE(all_close(host(matmul(a.to(kGpu), b.to(kGpu))), matmul(a, b), 1e-5, 1e-5));
  Tensor at = rand_f32({6, 8}, 21), bt = rand_f32({5, 6}, 22);  // A^T B^T as views
  EXPECT_TRUE(all_close(host(matmul(at.to(kGpu).transpose(), bt.to(kGpu).transpose())),
                        matmul(at.transpose(), bt.transpose()), 1e-5, 1e-5));
  Tensor v = rand_f32({6}, 23), m = rand_f32({6, 4}, 24);
  EXPECT_TRUE(all_close(host(matmul(v.to(kGpu), m.to(kGpu))), matmul(v, m), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(host(matmul(m.to(kGpu).transpose(), v.to(kGpu))),
                        matmul(m.transpose(), v), 1e-5, 1e-5));
  cuda::set_allow_tf32(true);
}

// ---- gradients, devices, memory ----------------------------------------------------------------
TEST(CudaAutograd, TapeGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto run = [](Device d) {
    Tensor x = rand_tensor({4, 6}, 25).to(d), w = rand_tensor({6, 3}, 26).to(d);
    GradientTape tape;
    tape.watch({x, w});
    Tensor y = sum(relu(matmul(x, w)) * 2.0) + mean(sigmoid(x)) + sum(log_softmax(x));
    auto g = tape.gradient(y, std::vector<Tensor>{x, w});
    return std::vector<Tensor>{host(g[0]), host(g[1])};
  };
  auto cpu = run(Device::cpu()), gpu = run(kGpu);
  EXPECT_TRUE(all_close(gpu[0], cpu[0], 1e-10, 1e-9));
  EXPECT_TRUE(all_close(gpu[1], cpu[1], 1e-10, 1e-9));
}

TEST(CudaDevices, MixingDevicesInOneOpIsAnError) {
  SKIP_WITHOUT_GPU();
  Tensor a = constant({1.0f, 2.0f}), b = a.to(kGpu);
  std::string m = error_of([&] { add(a, b); });
  EXPECT_NE(m.find("different devices"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  // A 0-d CPU tensor is a value and follows the other operand.
  EXPECT_TRUE(all_close(host(b * 3.0), {3.0, 6.0}));
}

TEST(CudaDevices, ReadingDeviceValuesOnTheHostIsAnError) {
  SKIP_WITHOUT_GPU();
  Tensor b = constant({1.0f}).to(kGpu);
  std::string m = error_of([&] { (void)b.item<float>(); });
  EXPECT_NE(m.find("to(Device::cpu())"), std::string::npos) << m;
  EXPECT_EQ(host(b).item<float>(), 1.0f);
}

// A test-only op with a CPU kernel and none for CUDA: a real op would go stale as kernels land.
const OpDef& cpu_only_test_op() {
  static const OpDef& def = []() -> const OpDef& {
    register_op({.name = "test_cuda.cpu_only_identity",
                 .num_inputs = 1,
                 .infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
                   return std::vector<TensorSpec>{in[0]};
                 }});
    register_kernel("test_cuda.cpu_only_identity", DeviceKind::CPU,
                    [](const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
                      const float* x = in[0].data<float>();  // f32, contiguous: test inputs
                      std::copy(x, x + in[0].numel(), out[0].data<float>());
                    });
    return get_op("test_cuda.cpu_only_identity");
  }();
  return def;
}

TEST(CudaDevices, AnOpWithoutACudaKernelSaysSo) {
  const OpDef& def = cpu_only_test_op();
  EXPECT_TRUE(all_close(call_op1(def, {ones({2, 3})}), ones({2, 3})));  // the CPU kernel runs
  SKIP_WITHOUT_GPU();
  Tensor x = zeros({2, 3}).to(kGpu);
  std::string m = error_of([&] { call_op1(def, {x}); });
  EXPECT_NE(m.find("op 'test_cuda.cpu_only_identity' has no kernel for cuda:0"), std::string::npos)
      << m;
}

TEST(CudaMemory, ASecondIdenticalAllocationIsACacheHit) {
  SKIP_WITHOUT_GPU();
  { Tensor warm = Tensor::empty({1000}, DType::f32, kGpu); }
  cuda::MemoryStats before = cuda::memory_stats();
  { Tensor again = Tensor::empty({1000}, DType::f32, kGpu); }
  cuda::MemoryStats after = cuda::memory_stats();
  EXPECT_EQ(after.num_allocs, before.num_allocs + 1);
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 1);
  EXPECT_EQ(after.num_device_mallocs, before.num_device_mallocs);
  EXPECT_GE(after.peak_allocated_bytes, 4000u);
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats().reserved_bytes, cuda::memory_stats().allocated_bytes);
}

TEST(CudaMemory, EventsTimeDeviceWork) {
  SKIP_WITHOUT_GPU();
  Tensor a = rand_f32({256, 256}, 27).to(kGpu);
  cuda::Event start, stop;
  start.record();
  Tensor c = matmul(a, a);
  stop.record();
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  cuda::synchronize();
}
