// The CPU kernels' fast paths (issue 5) against the generic loops they replace, and the caching
// CPU allocator behind Storage::allocate.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../../src/internal/cpu_allocator.hpp"
#include "fast_paths_testing.hpp"
#include "test_support.hpp"
#include <soma/soma.hpp>

namespace soma {
namespace {

using testing::all_close;
using testing::rand_tensor;

using testing::fast_and_generic;
using testing::FastPathsScope;

// Values on a coarse grid so that windows hold ties (the first maximum must win), plus NaNs.
Tensor pool_input(const Shape& s, DType t, bool with_nan) {
  Tensor x = floor(rand_tensor(s, 7, 0.0, 4.0, DType::f64));
  if (with_nan) {
    auto* p = x.data<double>();
    for (std::int64_t i = 0; i < x.numel(); i += 13) p[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return cast(x, t);
}

::testing::AssertionResult same_with_nan(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << "shapes differ";
  Tensor x = cast(a, DType::f64), y = cast(b, DType::f64);
  const double *p = x.data<double>(), *q = y.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const bool same = (std::isnan(p[i]) && std::isnan(q[i])) || p[i] == q[i];
    if (!same) return ::testing::AssertionFailure() << "index " << i << ": " << p[i] << " vs " << q[i];
  }
  return ::testing::AssertionSuccess();
}

class MaxPool2x2 : public ::testing::TestWithParam<std::tuple<DType, bool, Shape>> {};

TEST_P(MaxPool2x2, ForwardMatchesGenericLoop) {
  const auto [dtype, nan, shape] = GetParam();
  const Tensor x = pool_input(shape, dtype, nan);
  const auto [fast, generic] = fast_and_generic([&] { return max_pool2d(x, 2); });
  EXPECT_TRUE(same_with_nan(fast, generic));
}

TEST_P(MaxPool2x2, GradientMatchesGenericLoop) {
  const auto [dtype, nan, shape] = GetParam();
  const Tensor x = pool_input(shape, dtype, nan);
  const Tensor g = cast(rand_tensor(pool2d_output_shape(shape, 2), 3), dtype);
  const auto [fast, generic] = fast_and_generic([&] { return max_pool2d_grad(x, g, 2); });
  EXPECT_TRUE(same_with_nan(fast, generic));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MaxPool2x2,
    ::testing::Combine(::testing::Values(DType::f32, DType::f64), ::testing::Bool(),
                       // The vectorised f32 rows take 16 windows a step: LeNet's 28 and 14
                       // wide maps, several chunks with a tail, odd sizes, one full chunk.
                       ::testing::Values(Shape{2, 3, 8, 8}, Shape{1, 2, 5, 7}, Shape{3, 1, 2, 2},
                                         Shape{2, 3, 28, 28}, Shape{1, 2, 14, 14},
                                         Shape{1, 1, 4, 70}, Shape{2, 2, 9, 33},
                                         Shape{1, 1, 3, 64})));

TEST(MaxPool2x2, GradientGoesToTheFirstMaximumOfEachWindow) {
  // Window (0,0) holds a tie of 1s: the first (row-major) gets g; odd trailing row/column get 0.
  Tensor x = constant<float>({1, 1, 0, 5, 0,
                              1, 0, 2, 3, 9,
                              7, 7, 7, 7, 7}).reshape({1, 1, 3, 5});
  Tensor g = constant<float>({10, 20}).reshape({1, 1, 1, 2});
  EXPECT_TRUE(all_close(max_pool2d_grad(x, g, 2),
                        {10, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(all_close(max_pool2d(x, 2), {1, 5}));
}

class WhereDense : public ::testing::TestWithParam<int> {};

TEST_P(WhereDense, MatchesGenericLoop) {
  const int layout = GetParam();  // 0: a and b dense, 1: a a single element, 2: b one
  const Shape s{37, 1000};        // above the parallel grain
  const Tensor cond = greater(rand_tensor(s, 1), scalar(0.0, DType::f64));
  const Tensor a = layout == 1 ? scalar(3.5, DType::f32) : cast(rand_tensor(s, 2), DType::f32);
  const Tensor b = layout == 2 ? scalar(0.0, DType::f32) : cast(rand_tensor(s, 3), DType::f32);
  const auto [fast, generic] = fast_and_generic([&] { return where(cond, a, b); });
  EXPECT_TRUE(all_close(fast, generic, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Layouts, WhereDense, ::testing::Values(0, 1, 2));

TEST(WhereDense, NonContiguousOperandsTakeTheGenericLoop) {
  const Tensor cond = greater(rand_tensor({4, 6}, 1), scalar(0.0, DType::f64));
  const Tensor a = rand_tensor({6, 4}, 2).transpose();
  const Tensor b = rand_tensor({4, 6}, 3);
  Tensor w = where(cond, a, b);
  const bool* c = contiguous(cond).data<bool>();
  const Tensor ac = contiguous(a);
  for (std::int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(w.data<double>()[i], c[i] ? ac.data<double>()[i] : b.data<double>()[i]);
}

// ---- one-row matmul (GEMV) ---------------------------------------------------------------
// Naive [m, k] x [k, n] in double.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b) {
  const Tensor a64 = contiguous(cast(a, DType::f64)), b64 = contiguous(cast(b, DType::f64));
  const std::int64_t m = a64.dim(0), k = a64.dim(1), n = b64.dim(1);
  std::vector<double> out(std::size_t(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        out[std::size_t(i * n + j)] += a64.data<double>()[i * k + p] * b64.data<double>()[p * n + j];
  return out;
}

class OneRowMatmul : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(OneRowMatmul, MatchesNaiveProduct) {
  const auto [dtype, transposed_b] = GetParam();
  const Tensor x = cast(rand_tensor({1, 300}, 1), dtype);
  // b as a plain [300, 70] matrix or as the transposed view of a [70, 300] one.
  const Tensor b = transposed_b ? cast(rand_tensor({70, 300}, 2), dtype).transpose()
                                : cast(rand_tensor({300, 70}, 2), dtype);
  const double tol = dtype == DType::f32 ? 1e-4 : 1e-12;
  EXPECT_TRUE(all_close(matmul(x, b), naive_matmul(x, b), tol, tol));
  // A 1-d vector on the left takes the same path.
  EXPECT_TRUE(all_close(matmul(reshape(x, {300}), b), naive_matmul(x, b), tol, tol));
}

INSTANTIATE_TEST_SUITE_P(Layouts, OneRowMatmul,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f64),
                                            ::testing::Bool()));

// Products below about 2 MFLOP run on the calling thread (BLAS told to use one thread for the
// call); the thread setting must come back afterwards, and both sides of the threshold agree.
TEST(SmallMatmulOnOneThread, MatchesNaiveProductAndKeepsTheThreadSetting) {
  const int saved = get_num_threads();
  set_num_threads(2);
  for (auto [m, k, n] : {std::array<std::int64_t, 3>{32, 128, 128}, {1, 784, 128},
                         std::array<std::int64_t, 3>{64, 300, 70}, {128, 784, 128}}) {
    const Tensor a = rand_tensor({m, k}, 3), b = rand_tensor({k, n}, 4);
    EXPECT_TRUE(all_close(matmul(a, b), naive_matmul(a, b), 1e-4, 1e-4)) << m << "x" << k << "x" << n;
    EXPECT_EQ(get_num_threads(), 2) << "the serial scope did not restore the thread count";
  }
  set_num_threads(saved);
}

// ---- fused Dense inference (act(x W + b) in one kernel) ------------------------------------
// m, k, n, ReLU (else linear), bias.
using DenseCase = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool>;
class FusedDense : public ::testing::TestWithParam<DenseCase> {};

nn::Dense seeded_dense(std::int64_t n, bool relu, bool bias) {
  return nn::Dense(n, relu ? nn::relu : nn::linear,
                   {.use_bias = bias,
                    .kernel_initializer = nn::init::glorot_uniform(11),
                    .bias_initializer = nn::init::random_uniform(-0.5, 0.5, 12)});
}

TEST_P(FusedDense, MatchesMatmulAddActivationAndANaiveProduct) {
  const auto [m, k, n, relu, bias] = GetParam();
  nn::Dense d = seeded_dense(n, relu, bias);
  const Tensor x = cast(rand_tensor({m, k}, 5), DType::f32);
  NoGradScope no_grad;  // inference, as predict() runs it
  const auto [fast, generic] = fast_and_generic([&] { return d(x); });
  EXPECT_TRUE(all_close(fast, generic, 1e-5, 1e-5));
  std::vector<double> want = naive_matmul(x, d.kernel().value());
  const std::vector<double> b = bias ? d.bias().value().to_vector<double>() : std::vector<double>();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (bias) want[i] += b[i % std::size_t(n)];
    if (relu) want[i] = std::max(want[i], 0.0);
  }
  EXPECT_TRUE(all_close(fast, want, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedDense,
    ::testing::Values(DenseCase{1, 784, 128, true, true},  // the MLP's layers at batch 1
                      DenseCase{1, 128, 10, false, true}, DenseCase{1, 300, 16, true, false},
                      DenseCase{3, 50, 200, true, true},  // two column blocks, tail of 8
                      DenseCase{8, 33, 129, false, false}, DenseCase{1, 1, 1, true, true},
                      DenseCase{64, 784, 128, true, true}));  // too many rows: the generic ops

TEST(FusedDense, NanInputsStayNaNAfterReluAsTheGenericOpsDo) {
  nn::Dense d = seeded_dense(20, true, true);
  Tensor x = cast(rand_tensor({1, 30}, 6), DType::f32);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  NoGradScope no_grad;
  const auto [fast, generic] = fast_and_generic([&] { return d(x); });
  EXPECT_TRUE(same_with_nan(fast, generic));
  EXPECT_TRUE(std::isnan(sum(fast).item<double>()));  // NaN propagates through relu (issue 19)
}

TEST(FusedDense, UnderARecordingTapeTheOpsRunAndGradientsFlow) {
  nn::Dense d = seeded_dense(10, true, true);
  const Tensor x = cast(rand_tensor({1, 40}, 7), DType::f32);
  d(x);  // builds the layer
  GradientTape tape;
  const Tensor loss = sum(d(x));
  const Tensor g = tape.gradient(loss, d.kernel().value());
  ASSERT_TRUE(g.defined()) << "the fused kernel ran under a tape: no gradient was recorded";
  EXPECT_GT(sum(abs(g)).item<double>(), 0.0);
}

TEST(FusedDense, ACustomActivationNamedReluIsNotReplaced) {
  const nn::Activation twice("relu", [](const Tensor& t) { return t * 2.0; });
  nn::Dense d(5, twice, {.kernel_initializer = nn::init::glorot_uniform(13)});
  const Tensor x = cast(rand_tensor({1, 6}, 8), DType::f32);
  NoGradScope no_grad;
  const Tensor y = d(x);
  EXPECT_TRUE(all_close(y, matmul(x, d.kernel().value()) * 2.0, 1e-5, 1e-5));
}

// Dense passes one of two shared attribute lists, which the op reads by address; a list built by
// the caller (the op called by name, a model file) still decides by its "activation" value.
TEST(FusedDense, TheOpCalledWithItsOwnAttributeListAppliesItsActivation) {
  nn::Dense relu_layer = seeded_dense(12, true, true), linear_layer = seeded_dense(12, false, true);
  const Tensor x = cast(rand_tensor({1, 9}, 9), DType::f32);
  NoGradScope no_grad;
  const Tensor want_relu = relu_layer(x), want_linear = linear_layer(x);
  ASSERT_TRUE(any(want_linear < 0.0).item<bool>()) << "no negative output: relu is not tested";
  const OpDef& op = get_op("dense_bias_act");
  for (const bool fast : {true, false}) {
    FastPathsScope scope(fast);
    const Tensor r = call_op1(op, {x, relu_layer.kernel().value(), relu_layer.bias().value()},
                              Attrs{{"activation", std::string("relu")}});
    const Tensor l = call_op1(op, {x, linear_layer.kernel().value(), linear_layer.bias().value()},
                              Attrs{{"activation", std::string("linear")}});
    EXPECT_TRUE(all_close(r, want_relu, 1e-6, 1e-6)) << "fast paths " << fast;
    EXPECT_TRUE(all_close(l, want_linear, 1e-6, 1e-6)) << "fast paths " << fast;
    EXPECT_THROW(call_op1(op, {x, relu_layer.kernel().value()},
                          Attrs{{"activation", std::string("tanh")}}),
                 Error);
  }
}

// ---- the caching allocator ------------------------------------------------------------------
struct CacheOn {
  CacheOn() { detail::set_cpu_cache_enabled(true); }
  ~CacheOn() { detail::set_cpu_cache_enabled(true); }
};

TEST(CpuAllocator, ReusesAFreedBlockOfTheSameSize) {
  CacheOn on;
  detail::cpu_cache_release();
  void* p = detail::cpu_allocate(1000);
  detail::cpu_free(p, 1000);
  EXPECT_EQ(detail::cpu_cache_stats().cached_bytes, 1024u);
  const auto hits = detail::cpu_cache_stats().hits;
  void* q = detail::cpu_allocate(1000);
  EXPECT_EQ(p, q);
  EXPECT_EQ(detail::cpu_cache_stats().hits, hits + 1);
  EXPECT_EQ(detail::cpu_cache_stats().cached_bytes, 0u);
  detail::cpu_free(q, 1000);
}

TEST(CpuAllocator, BlocksAre64ByteAligned) {
  CacheOn on;
  for (std::size_t n : {1u, 63u, 64u, 65u, 4096u, 100000u, 3u << 20}) {
    void* p = detail::cpu_allocate(n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << n;
    detail::cpu_free(p, n);
  }
}

TEST(CpuAllocator, DisablingReleasesTheCacheAndStopsCaching) {
  CacheOn on;
  void* p = detail::cpu_allocate(5000);
  detail::cpu_free(p, 5000);
  EXPECT_GT(detail::cpu_cache_stats().cached_bytes, 0u);
  detail::set_cpu_cache_enabled(false);
  EXPECT_EQ(detail::cpu_cache_stats().cached_bytes, 0u);
  void* q = detail::cpu_allocate(5000);
  detail::cpu_free(q, 5000);
  EXPECT_EQ(detail::cpu_cache_stats().cached_bytes, 0u);
}

TEST(CpuAllocator, HugeBlocksAreNotCached) {
  CacheOn on;
  detail::cpu_cache_release();
  const std::size_t n = detail::kCpuCacheMaxBlock + 1;
  void* p = detail::cpu_allocate(n);
  detail::cpu_free(p, n);
  EXPECT_EQ(detail::cpu_cache_stats().cached_bytes, 0u);
}

TEST(CpuAllocator, ATensorOnAReusedBlockHoldsItsOwnValues) {
  CacheOn on;
  Tensor a = fill({256}, 1.0, DType::f32);
  const void* pa = a.data<float>();
  a = Tensor();
  Tensor b = fill({256}, 2.0, DType::f32);  // same size: gets a's old block
  EXPECT_EQ(static_cast<const void*>(b.data<float>()), pa);
  EXPECT_TRUE(all_close(sum(b), {512.0}));
}

}  // namespace
}  // namespace soma
