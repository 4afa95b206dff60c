// f32 matmul's library choice (docs/performance.md, workload 6): products BLAS would run go to
// OpenBLAS or oneDNN's sgemm by size and thread count (src/backend/cpu/onednn_matmul.cpp).
// Every route must equal a naive f64 product within f32 rounding, for plain, transposed,
// strided and batched operands at 1 and 2 threads; the override (SOMA_GEMM_IMPL /
// set_gemm_impl) must pick the route it names.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "../../src/backend/cpu/onednn_matmul.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using detail::GemmImpl;
using testing::rand_tensor;

// Runs f under the given implementation and thread count, restoring both.
template <class F>
void with(GemmImpl impl, int threads, F&& f) {
  const GemmImpl before = detail::gemm_impl();
  const int threads_before = get_num_threads();
  detail::set_gemm_impl(impl);
  set_num_threads(threads);
  f();
  set_num_threads(threads_before);
  detail::set_gemm_impl(before);
}

// The f64 product of a [..., m, k] and b [..., k, n] (batch dims broadcast from the left
// operand or equal), and sum |a_ip b_pj| per element: a k-term f32 dot product's rounding error
// is about k * 6e-8 of that sum.
struct Reference {
  std::vector<double> c, mag;
};

Reference reference(const Tensor& a, const Tensor& b) {
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const std::int64_t nb = std::max(a.numel() / (m * k), b.numel() / (k * n));
  const Tensor ad = a.cast(DType::f64).contiguous(), bd = b.cast(DType::f64).contiguous();
  const double *pa = ad.data<double>(), *pb = bd.data<double>();
  const std::int64_t a_batch = a.rank() > 2 ? m * k : 0, b_batch = b.rank() > 2 ? k * n : 0;
  Reference r{std::vector<double>(std::size_t(nb * m * n)), std::vector<double>(std::size_t(nb * m * n))};
  for (std::int64_t bi = 0; bi < nb; ++bi)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = pa[bi * a_batch + i * k + p];
        const double* y = pb + bi * b_batch + p * n;
        double* c = r.c.data() + (bi * m + i) * n;
        double* g = r.mag.data() + (bi * m + i) * n;
        for (std::int64_t j = 0; j < n; ++j) c[j] += x * y[j], g[j] += std::abs(x * y[j]);
      }
  return r;
}

::testing::AssertionResult matches(const Tensor& c, const Reference& r) {
  const Tensor cd = c.cast(DType::f64).contiguous();
  const double* pc = cd.data<double>();
  if (std::size_t(cd.numel()) != r.c.size())
    return ::testing::AssertionFailure() << cd.numel() << " elements, expected " << r.c.size();
  for (std::size_t i = 0; i < r.c.size(); ++i)
    if (!(std::abs(pc[i] - r.c[i]) <= 1e-5 * r.mag[i] + 1e-30))
      return ::testing::AssertionFailure() << "element " << i << ": " << pc[i] << " vs "
                                           << r.c[i] << " (sum |a b| " << r.mag[i] << ")";
  return ::testing::AssertionSuccess();
}

Tensor f32(const Shape& shape, std::uint64_t seed) { return rand_tensor(shape, seed, -1, 1, DType::f32); }

struct Operands {
  std::string what;
  Tensor a, b;
};

// Operand layouts that reach the GEMM call in each form it takes: packed, transposed (no copy),
// a row stride larger than the width (no copy), interleaved columns (packed first), batched.
std::vector<Operands> operand_cases(std::int64_t m, std::int64_t k, std::int64_t n) {
  std::uint64_t s = 100 * std::uint64_t(m + k + n);
  std::vector<Operands> out;
  out.push_back({"packed", f32({m, k}, s + 1), f32({k, n}, s + 2)});
  out.push_back({"a transposed", f32({k, m}, s + 3).transpose(), f32({k, n}, s + 4)});
  out.push_back({"b transposed", f32({m, k}, s + 5), f32({n, k}, s + 6).transpose()});
  out.push_back({"both transposed", f32({k, m}, s + 7).transpose(), f32({n, k}, s + 8).transpose()});
  out.push_back({"row-strided", f32({m, k + 5}, s + 9).slice(1, 2, k + 2),
                 f32({k, n + 3}, s + 10).slice(1, 0, n)});
  out.push_back({"interleaved columns", testing::noncontiguous(f32({m, k}, s + 11)),
                 testing::noncontiguous(f32({k, n}, s + 12))});
  out.push_back({"batched, b broadcast", f32({2, m, k}, s + 13), f32({k, n}, s + 14)});
  out.push_back({"batched, b transposed", f32({2, m, k}, s + 15),
                 f32({2, n, k}, s + 16).transpose(1, 2)});
  return out;
}

struct Size {
  std::int64_t m, k, n;
};

// Sizes on both sides of the automatic route's threshold (2^20 multiply-adds, and no dimension
// under 32) and of the serial / threaded cut (two kGemmGrain of internal/parallel.hpp: 2^23),
// plus odd, rectangular and thin ones.
const std::vector<Size> kSizes = {{64, 64, 64},    {97, 131, 65},  {101, 103, 107},
                                  {128, 128, 128}, {31, 200, 190}, {160, 150, 170},
                                  {256, 200, 180}};

void check_routes(const std::vector<GemmImpl>& impls) {
  for (const Size& z : kSizes)
    for (const Operands& o : operand_cases(z.m, z.k, z.n)) {
      const Reference r = reference(o.a, o.b);
      for (GemmImpl impl : impls)
        for (int threads : {1, 2})
          with(impl, threads, [&] {
            EXPECT_TRUE(matches(matmul(o.a, o.b), r))
                << o.what << ", m k n = " << z.m << " " << z.k << " " << z.n << ", route "
                << int(impl) << ", " << threads << " thread(s)";
          });
    }
}

TEST(SgemmDispatch, EveryRouteMatchesF64Reference) {
  if (detail::onednn_sgemm_built())
    check_routes({GemmImpl::blas, GemmImpl::onednn, GemmImpl::automatic});
  else
    check_routes({GemmImpl::blas, GemmImpl::automatic});
}

// The product a route forced to oneDNN computes through onednn_sgemm, counted.
std::int64_t onednn_calls_for(GemmImpl impl, int threads, const Tensor& a, const Tensor& b) {
  std::int64_t calls = 0;
  with(impl, threads, [&] {
    const std::int64_t before = detail::onednn_sgemm_calls();
    matmul(a, b);
    calls = detail::onednn_sgemm_calls() - before;
  });
  return calls;
}

TEST(SgemmDispatch, OverrideBlasKeepsEveryProductOnOpenBlas) {
  const Tensor a = f32({2, 200, 200}, 1), b = f32({200, 200}, 2);
  for (int t : {1, 2}) {
    EXPECT_EQ(onednn_calls_for(GemmImpl::blas, t, a, b), 0);
    with(GemmImpl::blas, t, [] { EXPECT_FALSE(detail::gemm_uses_onednn(2048, 2048, 2048, 1)); });
  }
}

TEST(SgemmDispatch, OverrideOneDnnSendsEachProductOfABatchToOneDnn) {
  if (!detail::onednn_sgemm_built()) GTEST_SKIP() << "soma was built without oneDNN";
  const Tensor a = f32({3, 200, 200}, 3), b = f32({200, 200}, 4);
  for (int t : {1, 2}) EXPECT_EQ(onednn_calls_for(GemmImpl::onednn, t, a, b), 3);
}

TEST(SgemmDispatch, AutomaticRouteTakesOneDnnAtOneThreadFromTheThreshold) {
  if (!detail::onednn_sgemm_built()) GTEST_SKIP() << "soma was built without oneDNN";
  // 101 x 103 x 107 is just above 2^20 multiply-adds, 97 x 131 x 65 just below.
  EXPECT_EQ(onednn_calls_for(GemmImpl::automatic, 1, f32({101, 103}, 11), f32({103, 107}, 12)), 1);
  EXPECT_EQ(onednn_calls_for(GemmImpl::automatic, 1, f32({97, 131}, 13), f32({131, 65}, 14)), 0);
  // A dimension under 32 stays on OpenBLAS.
  EXPECT_EQ(onednn_calls_for(GemmImpl::automatic, 1, f32({31, 200}, 15), f32({200, 190}, 16)), 0);
  EXPECT_TRUE(detail::gemm_uses_onednn(2048, 2048, 2048, 1));
}

TEST(SgemmDispatch, AutomaticRouteAtTwoThreadsTakesOneDnnFromTheSameThreshold) {
  if (!detail::onednn_sgemm_built()) GTEST_SKIP() << "soma was built without oneDNN";
  // Measured on the idle 2-core machine: oneDNN's threaded sgemm won at every size from 128^3.
  // Below 2^20 multiply-adds the product runs on the calling thread (the one-thread rule).
  for (int t : {2, 4}) {
    EXPECT_FALSE(detail::gemm_uses_onednn(97, 131, 65, t));
    EXPECT_TRUE(detail::gemm_uses_onednn(101, 103, 107, t));
    EXPECT_TRUE(detail::gemm_uses_onednn(784, 128, 32, t));  // the MLP's weight gradient
    EXPECT_TRUE(detail::gemm_uses_onednn(2048, 2048, 2048, t));
    EXPECT_FALSE(detail::gemm_uses_onednn(31, 2048, 2048, t));  // thin: OpenBLAS
  }
  EXPECT_EQ(onednn_calls_for(GemmImpl::automatic, 2, f32({128, 128}, 17), f32({128, 128}, 18)), 1);
  // One product, through matmul with a transposed operand, checked against the f64 reference.
  const Tensor a = f32({480, 500}, 19), b = f32({500, 490}, 20);
  with(GemmImpl::automatic, 2, [&] {
    const std::int64_t before = detail::onednn_sgemm_calls();
    const Tensor c = matmul(a, b.transpose().contiguous().transpose());
    EXPECT_EQ(detail::onednn_sgemm_calls() - before, 1);
    EXPECT_TRUE(matches(c, reference(a, b)));
  });
}

TEST(SgemmDispatch, VectorTimesMatrixAndSmallBatchesStayOnOpenBlas) {
  // GEMV (one row) and batches of small products threaded over the batch never ask oneDNN,
  // whatever the override says: their cost is the call, not the arithmetic.
  for (int t : {1, 2}) {
    EXPECT_EQ(onednn_calls_for(GemmImpl::onednn, t, f32({1, 784}, 5), f32({784, 128}, 6)), 0);
    EXPECT_EQ(onednn_calls_for(GemmImpl::onednn, t, f32({16, 20, 20}, 7), f32({20, 20}, 8)), 0);
    EXPECT_EQ(onednn_calls_for(GemmImpl::onednn, t, f32({8, 8}, 9), f32({8, 8}, 10)), 0);
  }
}

TEST(SgemmDispatch, EnvironmentValuesNameTheRoute) {
  EXPECT_EQ(detail::parse_gemm_impl(nullptr), GemmImpl::automatic);
  EXPECT_EQ(detail::parse_gemm_impl("auto"), GemmImpl::automatic);
  EXPECT_EQ(detail::parse_gemm_impl("blas"), GemmImpl::blas);
  EXPECT_EQ(detail::parse_gemm_impl("onednn"), GemmImpl::onednn);
  EXPECT_EQ(detail::parse_gemm_impl("cublas"), GemmImpl::automatic);  // unknown: the default
}

}  // namespace
}  // namespace soma
