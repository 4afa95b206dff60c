// The CUDA kernels of the index ops (concat, split, unstack, pad, gather, gather_grad, one_hot,
// argmax/argmin, all/any, diagonal) and the random ops against the CPU: forward, and gradients
// through GradientTape. The GPU tests skip without a usable device; the per-element math they
// launch is tested on the CPU in test_cuda_index_math.cpp. The first test runs everywhere: it
// lists the registered ops that have no CUDA kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "soma/cuda.hpp"
#include "soma/random_state.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::error_of;
using soma::testing::rand_tensor;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);
const std::vector<DType> kAllTypes = {DType::f32, DType::f64, DType::f16,     DType::bf16, DType::i32,
                                      DType::i64, DType::u8,  DType::boolean, DType::i8};
const std::vector<DType> kFloatTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor host(const Tensor& t) { return t.to(Device::cpu()); }
Tensor gpu(const Tensor& t) { return t.to(kGpu); }

// Data movement is exact: the same bits on both devices.
::testing::AssertionResult same(const Tensor& got_on_gpu, const Tensor& want) {
  const Tensor got = host(got_on_gpu);
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << " vs "
                                         << dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs "
                                         << shape_str(want.shape());
  const auto a = contiguous(got).cast(DType::f64).to_vector<double>();
  const auto b = contiguous(want).cast(DType::f64).to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (a[i] != a[i] && b[i] != b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

Tensor sample(const Shape& s, std::uint64_t seed, DType t) {
  if (t == DType::boolean) return greater(rand_tensor(s, seed), scalar(0.0));
  if (t == DType::u8) return rand_tensor(s, seed, 0, 200).cast(t);
  if (t == DType::i32 || t == DType::i64 || t == DType::i8)
    return rand_tensor(s, seed, -100, 100).cast(t);
  return rand_tensor(s, seed, -2, 2, t);
}

// d sum(f(x) * w) / dx for each x, on `d`, with fixed weights (so every output element counts).
template <class F>
std::vector<Tensor> grads_on(Device d, const std::vector<Tensor>& xs, F f) {
  std::vector<Tensor> on;
  for (const auto& x : xs) on.push_back(x.to(d));
  GradientTape tape;
  tape.watch(on);
  Tensor y = f(on);
  Tensor w = rand_tensor(y.shape(), 99, -1, 1, y.dtype()).to(d);
  auto g = tape.gradient(sum(y * w), on);
  for (auto& t : g) t = host(t);
  return g;
}
template <class F>
void expect_same_grads(const std::vector<Tensor>& xs, F f, double tol = 1e-6) {
  auto c = grads_on(Device::cpu(), xs, f), g = grads_on(kGpu, xs, f);
  ASSERT_EQ(c.size(), g.size());
  for (std::size_t i = 0; i < c.size(); ++i)
    EXPECT_TRUE(all_close(g[i], c[i], tol, tol)) << "gradient " << i;
}

}  // namespace

// ---- everywhere ------------------------------------------------------------------------------
TEST(CudaKernels, ListsTheOpsWithoutACudaKernel) {
  std::vector<std::string> missing;
  for (const OpDef* d : all_ops())
    if (d->kernels[int(DeviceKind::CUDA)] == nullptr) missing.push_back(d->name);
  std::cout << "ops without a CUDA kernel (" << missing.size() << "):";
  for (const auto& n : missing) std::cout << ' ' << n;
  std::cout << '\n';
  if (!cuda::is_built()) GTEST_SKIP() << "built without CUDA: no op has a CUDA kernel";
  for (const char* op : {"concat", "split", "unstack", "pad", "gather", "gather_grad", "one_hot",
                         "argmax", "argmin", "all", "any", "diagonal", "random_uniform",
                         "random_normal", "truncated_normal"})
    EXPECT_EQ(std::count(missing.begin(), missing.end(), op), 0) << op << " has no CUDA kernel";
}

// ---- concat, split, unstack, stack -------------------------------------------------------------
TEST(CudaIndexOps, ConcatMatchesTheCpuForEveryDtypeAndAxis) {
  SKIP_WITHOUT_GPU();
  for (DType t : kAllTypes) {
    for (int ax : {0, 1, 2}) {
      std::vector<Tensor> in;
      for (std::int64_t n : {3, 1, 0, 2}) {  // an empty part too
        Shape s = {2, 4, 3};
        s[std::size_t(ax)] = n;
        in.push_back(sample(s, std::uint64_t(n + 10 * ax), t));
      }
      std::vector<Tensor> on;
      for (const auto& x : in) on.push_back(gpu(x));
      EXPECT_TRUE(same(concat(on, ax), concat(in, ax))) << dtype_name(t) << " axis " << ax;
    }
  }
}

TEST(CudaIndexOps, ConcatOfManyAndStridedInputs) {
  SKIP_WITHOUT_GPU();
  std::vector<Tensor> in, on;
  for (int i = 0; i < 40; ++i) {  // more than one launch's worth of parts
    Tensor x = rand_tensor({3, 1 + i % 3}, std::uint64_t(i));
    in.push_back(x);
    on.push_back(gpu(x));
  }
  EXPECT_TRUE(same(concat(on, 1), concat(in, 1)));
  Tensor a = rand_tensor({4, 5}, 1), b = rand_tensor({5, 4}, 2);
  EXPECT_TRUE(same(concat({gpu(a), gpu(b).transpose()}, 0), concat({a, b.transpose()}, 0)));
  EXPECT_TRUE(same(stack({gpu(a), gpu(a) * 2.0}, 1), stack({a, a * 2.0}, 1)));
}

TEST(CudaIndexOps, SplitAndUnstackAreViewsOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_tensor({3, 5, 2}, 4);
  auto c = split(x, std::vector<std::int64_t>{2, 0, 3}, 1);
  auto g = split(gpu(x), std::vector<std::int64_t>{2, 0, 3}, 1);
  ASSERT_EQ(c.size(), g.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    EXPECT_TRUE(g[i].device().is_cuda());
    EXPECT_TRUE(same(g[i], c[i])) << "part " << i;
  }
  auto cu = unstack(x, 2), gu = unstack(gpu(x), 2);
  ASSERT_EQ(cu.size(), gu.size());
  for (std::size_t i = 0; i < cu.size(); ++i) EXPECT_TRUE(same(gu[i], cu[i]));
}

TEST(CudaIndexOps, ConcatSplitUnstackGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = rand_tensor({2, 3}, 1), b = rand_tensor({2, 2}, 2);
  expect_same_grads({a, b}, [](const std::vector<Tensor>& x) { return concat(x, 1); });
  expect_same_grads({a, a}, [](const std::vector<Tensor>& x) { return stack(x, 0); });
  Tensor c = rand_tensor({3, 5}, 3);
  expect_same_grads({c}, [](const std::vector<Tensor>& x) {
    auto p = split(x[0], std::vector<std::int64_t>{2, 3}, 1);
    return concat({p[1] * 3.0, p[0]}, 1);
  });
  expect_same_grads({c}, [](const std::vector<Tensor>& x) {
    auto p = unstack(x[0], 0);
    return p[0] * p[2];
  });
}

// ---- pad -------------------------------------------------------------------------------------
TEST(CudaIndexOps, PadMatchesTheCpuForEveryDtypeAndStridedInputs) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::int64_t, std::int64_t>> p = {{1, 0}, {2, 1}, {0, 3}};
  for (DType t : kAllTypes) {
    Tensor x = sample({2, 3, 4}, 5, t);
    EXPECT_TRUE(same(pad(gpu(x), p, 1.0), pad(x, p, 1.0))) << dtype_name(t);
    EXPECT_TRUE(same(pad(gpu(x).transpose(), p, 0.0), pad(x.transpose(), p, 0.0))) << dtype_name(t);
  }
  Tensor e = rand_tensor({0, 2}, 1);
  EXPECT_TRUE(same(pad(gpu(e), {{1, 1}, {0, 0}}, -2.5), pad(e, {{1, 1}, {0, 0}}, -2.5)));
  expect_same_grads({rand_tensor({3, 2}, 6)},
                    [&](const std::vector<Tensor>& x) { return pad(x[0], {{1, 2}, {0, 1}}, 0.5); });
}

// ---- gather / gather_grad ----------------------------------------------------------------------
TEST(CudaIndexOps, GatherMatchesTheCpuForEveryDtypeAxisAndIndexType) {
  SKIP_WITHOUT_GPU();
  for (DType t : kAllTypes) {
    Tensor x = sample({4, 5, 3}, 7, t);
    for (int ax : {0, 1, 2}) {
      const std::int64_t n = x.shape()[std::size_t(ax)];
      for (DType it : {DType::i64, DType::i32}) {
        Tensor idx = constant(std::vector<std::int64_t>{0, n - 1, -1, 1, -n, 0}, {2, 3}).cast(it);
        EXPECT_TRUE(same(gather(gpu(x), gpu(idx), ax), gather(x, idx, ax)))
            << dtype_name(t) << " axis " << ax << " indices " << dtype_name(it);
      }
    }
  }
}

TEST(CudaIndexOps, GatherReportsAnOutOfRangeIndexLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_tensor({4, 3}, 1);
  Tensor idx = constant(std::vector<std::int64_t>{1, 7, 2}, {3});
  const std::string want = error_of([&] { gather(x, idx, 0); });
  const std::string got = error_of([&] { gather(gpu(x), gpu(idx), 0); });
  EXPECT_EQ(got, want);
  EXPECT_NE(got.find("index 7 is out of range"), std::string::npos) << got;
  // The device is still usable afterwards.
  EXPECT_TRUE(same(gather(gpu(x), gpu(idx.slice(0, 0, 1)), 0), gather(x, idx.slice(0, 0, 1), 0)));
}

TEST(CudaIndexOps, GatherGradIsTheCpuScatterAddBitForBit) {
  SKIP_WITHOUT_GPU();
  // Many repeats (an embedding's frequent token): the sums follow the positions' order, as on
  // the CPU, so even f16 and bf16 sums agree exactly.
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back((i * 7) % 11 - (i % 3 == 0 ? 11 : 0));
  Tensor idx = constant(ids, {300});
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (int ax : {0, 1}) {
      const Shape table = ax == 0 ? Shape{11, 6} : Shape{2, 11, 6};
      Shape gs = table;
      gs[std::size_t(ax)] = 300;
      Tensor g = sample(gs, 3, t);
      Attrs a{{"axis", std::int64_t(ax)},
              {"input_shape", std::vector<std::int64_t>(table.begin(), table.end())}};
      const OpDef& d = get_op("gather_grad");
      EXPECT_TRUE(same(call_op1(d, {gpu(g), gpu(idx)}, a), call_op1(d, {g, idx}, a)))
          << dtype_name(t) << " axis " << ax;
    }
  }
}

TEST(CudaIndexOps, GatherGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor table = rand_tensor({10, 4}, 2);
  Tensor idx = constant(std::vector<std::int64_t>{3, 3, 0, 9, -1, 3}, {2, 3});
  expect_same_grads({table}, [&](const std::vector<Tensor>& x) {
    return gather(x[0], idx.to(x[0].device()), 0);
  });
  expect_same_grads({table}, [&](const std::vector<Tensor>& x) {
    return gather(x[0], idx.slice(1, 0, 2).to(x[0].device()), 1);
  });
}

// ---- one_hot ---------------------------------------------------------------------------------
TEST(CudaIndexOps, OneHotMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor idx = constant(std::vector<std::int64_t>{0, 3, -1, 4, 2, 2}, {2, 3});
  for (DType t : kAllTypes)
    for (DType it : {DType::i64, DType::i32})
      EXPECT_TRUE(same(one_hot(gpu(idx.cast(it)), 4, t, 1.0, 0.0), one_hot(idx.cast(it), 4, t, 1.0, 0.0)))
          << dtype_name(t);
  EXPECT_TRUE(same(one_hot(gpu(idx), 5, DType::f32, 2.5, -0.5), one_hot(idx, 5, DType::f32, 2.5, -0.5)));
}

// ---- argmax / argmin / all / any ---------------------------------------------------------------
TEST(CudaIndexOps, ArgmaxArgminMatchTheCpuWithTiesAndNans) {
  SKIP_WITHOUT_GPU();
  for (DType t : kAllTypes) {
    // Few distinct values: many ties, so "the first one wins" is exercised.
    Tensor x = t == DType::boolean ? sample({3, 70, 5}, 2, t)
                                   : rand_tensor({3, 70, 5}, 2, -3, 3).cast(DType::i32).cast(t);
    for (int ax : {0, 1, 2})
      for (bool keep : {false, true}) {
        EXPECT_TRUE(same(argmax(gpu(x), ax, keep), argmax(x, ax, keep))) << dtype_name(t) << ax;
        EXPECT_TRUE(same(argmin(gpu(x), ax, keep), argmin(x, ax, keep))) << dtype_name(t) << ax;
        EXPECT_TRUE(same(argmax(gpu(x).transpose(), ax, keep), argmax(x.transpose(), ax, keep)));
      }
  }
  // Long rows (one block per row) and short rows over many outputs (one thread per row).
  for (Shape s : {Shape{4, 5000}, Shape{3000, 7}}) {
    Tensor x = rand_tensor(s, 8);
    Tensor with_nan = where(greater(rand_tensor(s, 9), scalar(0.995f)), scalar(std::nan("")), x);
    for (const Tensor& v : {x, with_nan}) {
      EXPECT_TRUE(same(argmax(gpu(v), 1), argmax(v, 1))) << shape_str(s);
      EXPECT_TRUE(same(argmin(gpu(v), 0), argmin(v, 0))) << shape_str(s);
    }
  }
}

TEST(CudaIndexOps, AllAnyMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (Shape s : {Shape{3, 4}, Shape{5, 300}, Shape{2000, 3}, Shape{0, 3}}) {
    for (double p : {0.01, 0.5, 0.99}) {
      Tensor x = greater(rand_tensor(s, 4, 0, 1), scalar(p));
      for (const std::vector<std::int64_t>& axes : {std::vector<std::int64_t>{},
                                                     std::vector<std::int64_t>{0},
                                                     std::vector<std::int64_t>{1}})
        for (bool keep : {false, true}) {
          EXPECT_TRUE(same(all(gpu(x), axes, keep), all(x, axes, keep))) << shape_str(s) << p;
          EXPECT_TRUE(same(any(gpu(x), axes, keep), any(x, axes, keep))) << shape_str(s) << p;
          EXPECT_TRUE(same(any(gpu(x).transpose(), axes, keep), any(x.transpose(), axes, keep)));
        }
    }
  }
}

// ---- diagonal (a view: its kernel serves every device) -----------------------------------------
TEST(CudaIndexOps, DiagonalIsAViewOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_tensor({4, 4}, 3);
  Tensor g = diag(gpu(x));
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_TRUE(same(g, diag(x)));
  expect_same_grads({x}, [](const std::vector<Tensor>& v) { return diag(v[0]) * 2.0; });
}

// ---- random ops: the CPU's generator on the device ----------------------------------------------
TEST(CudaRandom, UniformDrawsTheCpuNumbersBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    Tensor like = zeros({1001}, t);  // not a multiple of the lanes per block
    const double lo = t == DType::i32 || t == DType::i64 ? -50 : -1.5;
    EXPECT_TRUE(same(random_uniform_like(gpu(like), lo, 7, 42), random_uniform_like(like, lo, 7, 42)))
        << dtype_name(t);
  }
  Tensor like = zeros({9}, DType::i64);
  EXPECT_TRUE(same(random_uniform_like(gpu(like), -9223372036854775808.0, 9223372036854775808.0, 0),
                   random_uniform_like(like, -9223372036854775808.0, 9223372036854775808.0, 0)));
}

TEST(CudaRandom, NormalsMatchTheCpuWithinRounding) {
  SKIP_WITHOUT_GPU();
  for (DType t : kFloatTypes) {
    Tensor like = zeros({4097}, t);
    const double tol = t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-5 : 2e-2;
    EXPECT_TRUE(all_close(host(random_normal_like(gpu(like), 0.5, 2.0, 3)).cast(DType::f64),
                          random_normal_like(like, 0.5, 2.0, 3).cast(DType::f64), tol, tol))
        << dtype_name(t);
    // Truncated: a value within rounding of +-2 could be redrawn on one device only; allow a few.
    auto g = host(truncated_normal_like(gpu(like), 0.0, 1.0, 4)).cast(DType::f64).to_vector<double>();
    auto c = truncated_normal_like(like, 0.0, 1.0, 4).cast(DType::f64).to_vector<double>();
    int differ = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_LT(std::abs(g[i]), 2.0 + tol);
      differ += std::abs(g[i] - c[i]) > tol * (1 + std::abs(c[i]));
    }
    EXPECT_LE(differ, 2) << dtype_name(t);
  }
}

TEST(CudaRandom, UnseededDrawsFollowTheGlobalGeneratorLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor like = zeros({100});
  set_seed(123);
  Tensor g1 = random_uniform_like(gpu(like)), g2 = random_normal_like(gpu(like));
  const RngState after_gpu = get_rng_state();
  set_seed(123);
  Tensor c1 = random_uniform_like(like), c2 = random_normal_like(like);
  EXPECT_EQ(get_rng_state(), after_gpu);
  EXPECT_TRUE(same(g1, c1));
  EXPECT_TRUE(all_close(host(g2), c2, 1e-5, 1e-5));
}

TEST(CudaRandom, DropoutRunsOnTheDeviceWithTheCpuMask) {
  SKIP_WITHOUT_GPU();
  nn::Dropout cpu_layer(0.3, 7), gpu_layer(0.3, 7);
  cpu_layer.train();
  gpu_layer.train();
  Tensor x = rand_tensor({8, 50}, 1);
  for (int step = 0; step < 3; ++step) {  // a new mask per call, the same on both devices
    Tensor g = gpu_layer(gpu(x));
    EXPECT_TRUE(g.device().is_cuda());
    EXPECT_TRUE(all_close(host(g), cpu_layer(x), 1e-6, 1e-6)) << "step " << step;
  }
}
