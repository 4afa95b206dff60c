// Autocast on a real GPU (issue 23): the dispatcher's bf16/f16 path (src/ops/registry.cpp) with
// cuBLAS, cuBLASLt and cuDNN in low precision, against the CPU on rounded operands, and a model
// compiled with mixed_precision training on the GPU. Skips without a GPU; the same path on the
// CPU stand-in device is test_autocast_device.cpp.
#include <gtest/gtest.h>

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
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// The op on operands rounded to `low`, computed in f64 on the CPU.
Tensor rounded_f64(Tensor (*op)(const Tensor&, const Tensor&), const Tensor& a, const Tensor& b,
                   DType low) {
  return op(cast(cast(a, low), DType::f64), cast(cast(b, low), DType::f64));
}

TEST(CudaAutocast, MatmulAndDenseRunLowAndReturnF32) {
  SKIP_WITHOUT_GPU();
  const Tensor a = rand_tensor({64, 96}, 1, -1, 1, DType::f32), b = rand_tensor({96, 48}, 2, -1, 1, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor want = rounded_f64([](const Tensor& x, const Tensor& y) { return matmul(x, y); }, a, b, low);
    AutocastScope scope(low);
    const Tensor y = matmul(a.to(kGpu), b.to(kGpu));
    EXPECT_EQ(y.dtype(), DType::f32);
    // f32 accumulation of rounded products; the output rounded to `low` once.
    const double tol = low == DType::bf16 ? 0.1 : 0.02;
    EXPECT_TRUE(all_close(cast(host(y), DType::f64), want, tol, 1e-2)) << dtype_name(low);
    nn::Dense dense(48);
    dense.to(kGpu);
    const Tensor z = dense(a.to(kGpu));
    EXPECT_EQ(z.dtype(), DType::f32);
  }
}

TEST(CudaAutocast, ConvolutionRunsLow) {
  SKIP_WITHOUT_GPU();
  const Tensor x = rand_tensor({4, 8, 12, 12}, 3, -1, 1, DType::f32);
  const Tensor w = rand_tensor({16, 8, 3, 3}, 4, -1, 1, DType::f32);
  const Tensor want = conv2d(cast(cast(x, DType::bf16), DType::f64), cast(cast(w, DType::bf16), DType::f64), 1, "same");
  AutocastScope scope(DType::bf16);
  const Tensor y = conv2d(x.to(kGpu), w.to(kGpu), 1, "same");
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(cast(host(y), DType::f64), want, 0.1, 1e-2));
}

TEST(CudaAutocast, Bf16AndF16TrainingReachTheF32Loss) {
  SKIP_WITHOUT_GPU();
  const Tensor x = rand_tensor({512, 32}, 5, -1, 1, DType::f32);
  const Tensor proj = rand_tensor({32, 4}, 6, -1, 1, DType::f32);
  const Tensor y = cast(argmax(matmul(x, proj), -1), DType::i64);
  auto run = [&](const std::string& precision) {
    set_seed(3);
    nn::Sequential m{nn::Input({32}), nn::Dense(64, nn::relu), nn::Dense(64, nn::relu), nn::Dense(4)};
    m.to(kGpu);
    m.compile(optim::Adam({.learning_rate = 3e-3}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
              {.mixed_precision = precision});
    m.fit(x, y, {.epochs = 8, .batch_size = 32, .shuffle = false, .verbose = 0});
    for (const auto& p : m.parameters()) EXPECT_EQ(p.value().dtype(), DType::f32) << precision;
    return m.evaluate(x, y, {.verbose = 0}).at("loss");
  };
  const double f32 = run("");
  const double bf16 = run("bf16");
  const double f16 = run("f16");
  EXPECT_LT(f32, 0.5);  // it learned (chance: ln 4 = 1.39)
  EXPECT_NEAR(bf16, f32, 0.05 + 0.1 * f32);
  EXPECT_NEAR(f16, f32, 0.05 + 0.1 * f32);
  EXPECT_NE(bf16, f32);  // autocast ran
}

}  // namespace
