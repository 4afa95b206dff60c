// dense_bias_act (cuBLASLt with the bias / ReLU epilogue) and the fused optimiser update kernels
// on CUDA against the CPU. Every test skips without a usable GPU (docs/cuda.md: running them on a
// GPU machine).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../../src/backend/cuda/dense_plan.hpp"
#include "../../src/internal/optim_updates.hpp"
#include "soma/cuda.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"
#include "update_cases.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);

Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// Sets cuda::allow_tf32 for a scope.
struct Tf32 {
  explicit Tf32(bool on) : before(cuda::allow_tf32()) { cuda::set_allow_tf32(on); }
  ~Tf32() { cuda::set_allow_tf32(before); }
  bool before;
};

Tensor dense(const Tensor& x, const Tensor& w, const Tensor* b, bool relu) {
  std::vector<Tensor> in{x, w};
  if (b) in.push_back(*b);
  return call_op1(get_op("dense_bias_act"), in,
                  Attrs{{"activation", std::string(relu ? "relu" : "linear")}});
}

struct DenseShape {
  Shape x;  // [..., k]
  std::int64_t n;
};
// Odd sizes (no multiple of 8 or 16), batch 1, vectors on either side, a 3-d input.
const DenseShape kDenseShapes[] = {{{1, 1}, 1},     {{1, 7}, 3},      {{3, 17}, 5},
                                   {{1, 300}, 129}, {{33, 65}, 129},  {{64, 128}, 96},
                                   {{2, 3, 4}, 5},  {{257, 31}, 1},   {{5, 1}, 77}};

// dense_bias_act on CUDA in dtype t (inputs drawn in f32, rounded to t) against the CPU op on the
// same rounded values in f32 (f64 for f64); the CUDA result compared in that dtype.
void check_dense(DType t, double tol) {
  std::uint64_t seed = 1;
  for (const DenseShape& s : kDenseShapes) {
    const std::int64_t k = s.x.back();
    const Tensor x = rand_tensor(s.x, seed++, -1.0, 1.0, DType::f32).to(t);
    const Tensor w = rand_tensor({k, s.n}, seed++, -1.0, 1.0, DType::f32).to(t);
    const Tensor b = rand_tensor({s.n}, seed++, -1.0, 1.0, DType::f32).to(t);
    for (bool with_bias : {true, false})
      for (bool relu : {false, true}) {
        const DType r = t == DType::f64 ? DType::f64 : DType::f32;  // the reference's dtype
        const Tensor bf = b.to(r);
        const Tensor want = dense(x.to(r), w.to(r), with_bias ? &bf : nullptr, relu);
        const Tensor bg = b.to(kGpu);
        const Tensor got = dense(x.to(kGpu), w.to(kGpu), with_bias ? &bg : nullptr, relu);
        EXPECT_EQ(got.dtype(), t);
        EXPECT_EQ(got.shape(), want.shape());
        // |error| grows with k: the tolerance is per unit of sqrt(k) (values of size ~sqrt(k)).
        const double scale = tol * std::sqrt(double(k));
        EXPECT_TRUE(all_close(host(got).to(r), want, scale, tol))
            << dtype_name(t) << " x " << shape_str(s.x) << " units " << s.n
            << (with_bias ? " bias" : " no bias") << (relu ? " relu" : " linear");
      }
  }
}

}  // namespace

TEST(CudaDense, F32MatchesTheCpuWithTf32Off) {
  SKIP_WITHOUT_GPU();
  Tf32 off(false);
  check_dense(DType::f32, 5e-6);
}

TEST(CudaDense, F32WithTf32IsClose) {
  SKIP_WITHOUT_GPU();
  Tf32 on(true);
  check_dense(DType::f32, 2e-3);
}

TEST(CudaDense, F16MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_dense(DType::f16, 2e-3);
}

TEST(CudaDense, Bf16MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_dense(DType::bf16, 1e-2);
}

TEST(CudaDense, F64MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_dense(DType::f64, 1e-13);
}

// Views: a transposed kernel, a row-strided input, a bias with stride 2; and the same shape twice
// (the cached plan) with other data.
TEST(CudaDense, ViewsAndACachedPlan) {
  SKIP_WITHOUT_GPU();
  Tf32 off(false);
  const Tensor x = rand_tensor({9, 40}, 7, -1.0, 1.0, DType::f32);
  const Tensor wt = rand_tensor({6, 13}, 8, -1.0, 1.0, DType::f32);  // kernel^T
  const Tensor b2 = rand_tensor({12}, 9, -1.0, 1.0, DType::f32);
  const Tensor xv = slice(x, {{0, 9}, {5, 18}});                         // [9, 13], row stride 40
  const Tensor w = transpose(wt, {1, 0});                              // [13, 6], strides (1, 13)
  const Tensor b = slice(b2, {{0, 12, 2}});                          // [6], stride 2
  const Tensor want = dense(contiguous(xv), contiguous(w), &b, true);
  const Tensor xg = x.to(kGpu), wg = wt.to(kGpu), bg = b2.to(kGpu);
  const Tensor bv = slice(bg, {{0, 12, 2}});
  const Tensor got = dense(slice(xg, {{0, 9}, {5, 18}}), transpose(wg, {1, 0}), &bv, true);
  EXPECT_TRUE(all_close(host(got), want, 1e-5, 1e-5));
  for (int round = 0; round < 2; ++round) {
    const Tensor x2 = rand_tensor({9, 13}, 20 + round, -1.0, 1.0, DType::f32);
    const Tensor w2 = rand_tensor({13, 6}, 30 + round, -1.0, 1.0, DType::f32);
    const Tensor c2 = contiguous(b);
    const Tensor cg = c2.to(kGpu);
    EXPECT_TRUE(all_close(host(dense(x2.to(kGpu), w2.to(kGpu), &cg, false)),
                          dense(x2, w2, &c2, false), 1e-5, 1e-5))
        << "round " << round;
  }
}

// NaN in a row of x: the CPU keeps it through the ReLU (as the relu op does); so must CUDA.
TEST(CudaDense, ReluKeepsNaN) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<float> xs(3 * 4, 0.5f);
    xs[4] = std::nanf("");  // row 1
    const Tensor x = constant(xs, {3, 4}).to(t);
    const Tensor w = rand_tensor({4, 5}, 51, -1.0, 1.0, DType::f32).to(t);
    const Tensor b = rand_tensor({5}, 52, -1.0, 1.0, DType::f32).to(t);
    for (bool with_bias : {true, false}) {
      const Tensor bg = b.to(kGpu);
      const std::vector<float> y =
          host(dense(x.to(kGpu), w.to(kGpu), with_bias ? &bg : nullptr, true))
              .to(DType::f32)
              .to_vector<float>();
      for (int j = 0; j < 5; ++j) {
        EXPECT_TRUE(std::isnan(y[std::size_t(5 + j)]))
            << dtype_name(t) << (with_bias ? " bias" : "") << ": y[1, " << j << "] = "
            << y[std::size_t(5 + j)] << ", expected NaN (set kReluEpilogue false in "
            << "src/backend/cuda/dense.cpp if the epilogue drops NaN)";
        EXPECT_FALSE(std::isnan(y[std::size_t(j)]));
      }
    }
  }
}

// A Dense layer's training step on CUDA: the forward through the new kernel, the gradient
// through ops (the op's gradient is written with ops).
TEST(CudaDense, GradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tf32 off(false);
  const Tensor x = rand_tensor({8, 11}, 41, -1.0, 1.0, DType::f32);
  const Tensor w = rand_tensor({11, 7}, 42, -1.0, 1.0, DType::f32);
  const Tensor b = rand_tensor({7}, 43, -1.0, 1.0, DType::f32);
  auto grads = [&](Device d) {
    const Tensor wd = w.to(d), bd = b.to(d);
    GradientTape tape;
    tape.watch(std::vector<Tensor>{wd, bd});
    const Tensor loss = sum(square(dense(x.to(d), wd, &bd, true)));
    auto g = tape.gradient(loss, std::vector<Tensor>{wd, bd});
    return std::vector<Tensor>{host(g[0]), host(g[1])};
  };
  const auto cpu = grads(Device::cpu()), gpu = grads(kGpu);
  EXPECT_TRUE(all_close(gpu[0], cpu[0], 1e-4, 1e-5));
  EXPECT_TRUE(all_close(gpu[1], cpu[1], 1e-4, 1e-5));
}

// ---- registration: every build with CUDA ------------------------------------------------------
// The update ops' CUDA kernels are the fused ones, not the composites every device starts with.
TEST(CudaDenseUpdateRegistration, UpdateOpsHaveFusedCudaKernels) {
  if (!cuda::is_built()) GTEST_SKIP() << "built without CUDA";
  const std::pair<const char*, KernelFn> composites[] = {
      {"sgd_update", detail::sgd_update_composite},
      {"adam_update", detail::adam_update_composite},
      {"nadam_update", detail::nadam_update_composite},
      {"rmsprop_update", detail::rmsprop_update_composite},
      {"adagrad_update", detail::adagrad_update_composite}};
  for (const auto& [name, composite] : composites) {
    const KernelFn k = get_op(name).kernels[int(DeviceKind::CUDA)];
    EXPECT_NE(k, nullptr) << name;
    EXPECT_NE(k, composite) << name << " still runs its composite on CUDA";
  }
  EXPECT_NE(get_op("dense_bias_act").kernels[int(DeviceKind::CUDA)], nullptr);
}

// ---- the GEMM layout (dense_plan.hpp), on the CPU: every build ----------------------------------
namespace {

using soma::cuda_detail::DenseGemm;
using soma::cuda_detail::MatrixDesc;

// Element (r, c) of op(M) for a column-major M described by md.
double op_at(const MatrixDesc& md, const std::vector<double>& mem, std::int64_t r, std::int64_t c) {
  return md.trans ? mem[std::size_t(c + r * md.ld)] : mem[std::size_t(r + c * md.ld)];
}

// What cuBLASLt computes from the descriptors: D = op(A) op(B), plus the bias epilogue (bias[i]
// added to row i of D), on column-major memory; A is the kernel's memory, B x's.
std::vector<double> run_descriptors(const DenseGemm& g, std::int64_t m, std::int64_t n,
                                    std::int64_t k, const std::vector<double>& w_mem,
                                    const std::vector<double>& x_mem,
                                    const std::vector<double>& bias) {
  auto dims = [](const MatrixDesc& md) {
    return md.trans ? std::pair{md.cols, md.rows} : std::pair{md.rows, md.cols};
  };
  EXPECT_EQ(dims(g.a), (std::pair<std::int64_t, std::int64_t>{n, k}));
  EXPECT_EQ(dims(g.b), (std::pair<std::int64_t, std::int64_t>{k, m}));
  EXPECT_FALSE(g.d.trans);
  EXPECT_EQ(dims(g.d), (std::pair<std::int64_t, std::int64_t>{n, m}));
  for (const MatrixDesc* md : {&g.a, &g.b, &g.d}) EXPECT_GE(md->ld, std::max<std::int64_t>(md->rows, 1));
  std::vector<double> d(std::size_t(g.d.ld * m), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      double s = bias[std::size_t(i)];
      for (std::int64_t l = 0; l < k; ++l) s += op_at(g.a, w_mem, i, l) * op_at(g.b, x_mem, l, j);
      d[std::size_t(i + j * g.d.ld)] = s;
    }
  return d;
}

struct StridedCase {
  std::int64_t m, n, k, x_rs, x_cs, w_rs, w_cs;
};

}  // namespace

// The descriptors dense_gemm() builds, run as cuBLASLt would run them, give y = x W + b for
// packed, row-strided and transposed views of x and the kernel, and size-1 dimensions.
TEST(CudaDensePlan, DescriptorsComputeXWPlusBias) {
  const StridedCase cases[] = {
      {3, 5, 4, 4, 1, 5, 1},     // both packed
      {3, 5, 4, 7, 1, 1, 6},     // x rows strided, kernel a transposed view
      {3, 5, 4, 1, 4, 5, 1},     // x a transposed view
      {3, 5, 4, 1, 3, 1, 4},     // both transposed views
      {1, 1, 1, 9, 9, 9, 9},     // all size 1: any strides
      {1, 6, 5, 100, 1, 6, 1},   // batch 1, its row stride unused
      {7, 1, 3, 3, 1, 1, 50},    // one unit
      {4, 3, 1, 1, 1, 3, 1},     // k = 1
  };
  for (const StridedCase& c : cases) {
    const DenseGemm g = soma::cuda_detail::dense_gemm(c.m, c.n, c.k, c.x_rs, c.x_cs, c.w_rs, c.w_cs);
    ASSERT_TRUE(g.a.ok && g.b.ok && g.d.ok) << c.m << " " << c.n << " " << c.k;
    auto span = [](std::int64_t r, std::int64_t cc, std::int64_t rs, std::int64_t cs) {
      return std::size_t((r - 1) * rs + (cc - 1) * cs + 1);
    };
    std::vector<double> x_mem(span(c.m, c.k, c.x_rs, c.x_cs)), w_mem(span(c.k, c.n, c.w_rs, c.w_cs));
    for (std::size_t i = 0; i < x_mem.size(); ++i) x_mem[i] = 0.25 * double(i % 7) - 0.5;
    for (std::size_t i = 0; i < w_mem.size(); ++i) w_mem[i] = 0.125 * double(i % 11) - 0.6;
    std::vector<double> bias(std::size_t(c.n));
    for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = double(i) - 1.5;
    const std::vector<double> d = run_descriptors(g, c.m, c.n, c.k, w_mem, x_mem, bias);
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        double want = bias[std::size_t(j)];
        for (std::int64_t l = 0; l < c.k; ++l)
          want += x_mem[std::size_t(i * c.x_rs + l * c.x_cs)] * w_mem[std::size_t(l * c.w_rs + j * c.w_cs)];
        EXPECT_DOUBLE_EQ(d[std::size_t(j + i * g.d.ld)], want)
            << "y[" << i << ", " << j << "] for m " << c.m << " n " << c.n << " k " << c.k;
      }
  }
}

// Views no cuBLASLt layout describes are reported, so that the kernel packs them.
TEST(CudaDensePlan, UnfitViewsAreRejected) {
  EXPECT_FALSE(soma::cuda_detail::dense_gemm(3, 5, 4, 8, 2, 5, 1).b.ok);    // x columns strided
  EXPECT_FALSE(soma::cuda_detail::dense_gemm(3, 5, 4, 4, 1, 10, 2).a.ok);   // kernel columns strided
  EXPECT_FALSE(soma::cuda_detail::dense_gemm(3, 5, 4, 2, 1, 5, 1).b.ok);    // overlapping rows
}

// ---- the update ops ----------------------------------------------------------------------------
namespace {

using namespace soma::update_cases;

// kSteps of the op on `d`, fused kernels on or off: the variable and the slots at the end, on the
// host.
std::vector<Tensor> run_update(const UpdateCase& c, DType t, Device d, bool fused,
                               const Shape& shape = kShape) {
  FusedKernels k(fused);
  std::vector<Tensor> s = initial_state(c, t, shape);
  for (Tensor& x : s) x = x.to(d);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Tensor> in{s[0], gradient(step, t, shape).to(d)};
    in.insert(in.end(), s.begin() + 1, s.end());
    call_op(get_op(c.op), in, c.attrs(step));
  }
  for (Tensor& x : s) x = host(x);
  return s;
}

void check_updates(DType t, double tol, bool fused, const Shape& shape = kShape) {
  for (const UpdateCase& c : all_cases()) {
    const auto want = run_update(c, t, Device::cpu(), true, shape);
    const auto got = run_update(c, t, kGpu, fused, shape);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(all_close(got[i].to(DType::f64), want[i].to(DType::f64), tol, tol))
          << c.name << " " << dtype_name(t) << (fused ? " fused" : " composite")
          << (i == 0 ? ": the variable" : ": slot ") << (i == 0 ? "" : std::to_string(i - 1));
  }
}

}  // namespace

TEST(CudaUpdates, F32FusedMatchesTheCpuOverFiveSteps) {
  SKIP_WITHOUT_GPU();
  check_updates(DType::f32, 2e-6, true);
}

TEST(CudaUpdates, F64FusedMatchesTheCpuOverFiveSteps) {
  SKIP_WITHOUT_GPU();
  check_updates(DType::f64, 1e-13, true);
}

TEST(CudaUpdates, CompositeOnCudaMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_updates(DType::f32, 2e-6, false);
}

// The step scalars of FitOptions::cuda_graph: the fused kernel reads them from the device
// (rule.set_step), the composite casts them there; the attributes' results, bit for bit.
TEST(CudaUpdates, StepScalarsGiveTheAttributesResults) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::f32, DType::f64})
    for (bool fused : {true, false}) EXPECT_TRUE(step_scalars_match(kGpu, t, fused));
}

// f16 and bf16 variables run the composite on CUDA as on the CPU.
TEST(CudaUpdates, HalfPrecisionMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_updates(DType::f16, 2e-3, true);
  check_updates(DType::bf16, 2e-2, true);
}

// More elements than the launch's grid covers in one pass (the grid-stride loop).
TEST(CudaUpdates, LargeVariable) {
  SKIP_WITHOUT_GPU();
  const UpdateCase c = adam(true, 0.04);
  const Shape big{(std::int64_t(1) << 24) + 3};
  const auto want = run_update(c, DType::f32, Device::cpu(), true, big);
  const auto got = run_update(c, DType::f32, kGpu, true, big);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], 2e-6, 2e-6)) << "tensor " << i;
}
