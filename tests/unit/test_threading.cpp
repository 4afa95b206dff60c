// The intra-op thread pool: set_num_threads governs soma's OpenMP loops and OpenBLAS alike, and
// results do not depend on the number of threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.hpp"

// OpenBLAS's own view of its thread count (tests/CMakeLists.txt links this test to the BLAS).
extern "C" int openblas_get_num_threads();

namespace soma {
namespace {

using testing::rand_tensor;

// Restores the thread count every test started with, so tests do not leak settings.
class Threading : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_num_threads(); }
  void TearDown() override { set_num_threads(saved_); }

  // Runs f with n threads and returns its result as plain floats.
  template <class F>
  std::vector<float> with_threads(int n, F&& f) {
    set_num_threads(n);
    return f().template to_vector<float>();
  }

 private:
  int saved_ = 1;
};

TEST_F(Threading, GetNumThreadsReturnsWhatWasSet) {
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
  }
}

TEST_F(Threading, SetNumThreadsRejectsZeroNamingTheFunction) {
  try {
    set_num_threads(0);
    FAIL() << "set_num_threads(0) did not throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("set_num_threads"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0"), std::string::npos) << msg;
  }
}

TEST_F(Threading, SetNumThreadsRejectsNegativeCounts) {
  EXPECT_THROW(set_num_threads(-2), Error);
}

TEST_F(Threading, RejectedCountLeavesTheSettingUnchanged) {
  set_num_threads(2);
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_EQ(get_num_threads(), 2);
}

TEST_F(Threading, OpenBlasFollowsSetNumThreads) {
  set_num_threads(1);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(openblas_get_num_threads(), 2);
}

TEST_F(Threading, LargeElementwiseOpGivesIdenticalResultsWithOneAndTwoThreads) {
  // Far above the parallel grain, so two threads really split the work.
  Tensor a = rand_tensor({1 << 20}, 1, -2.0, 2.0, DType::f32);
  Tensor b = rand_tensor({1 << 20}, 2, -2.0, 2.0, DType::f32);
  auto f = [&] { return exp(a) * b + tanh(a); };
  std::vector<float> one = with_threads(1, f);
  std::vector<float> two = with_threads(2, f);
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << "element " << i;
}

TEST_F(Threading, LargeBroadcastAddOnTwoThreadsMatchesANaiveLoopExactly) {
  const std::int64_t rows = 1024, cols = 1000;
  Tensor a = rand_tensor({rows, cols}, 3, -1.0, 1.0, DType::f32);
  Tensor b = rand_tensor({cols}, 4, -1.0, 1.0, DType::f32);
  std::vector<float> got = with_threads(2, [&] { return a + b; });

  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  ASSERT_EQ(got.size(), av.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      std::size_t i = std::size_t(r * cols + c);
      ASSERT_EQ(got[i], av[i] + bv[std::size_t(c)]) << "row " << r << ", col " << c;
    }
}

TEST_F(Threading, NonContiguousInputGivesIdenticalResultsWithOneAndTwoThreads) {
  // Above two grains (internal/parallel.hpp: 2 x 256k elements), so two threads split it.
  Tensor a = rand_tensor({768, 700}, 5, -3.0, 3.0, DType::f32);
  Tensor at = a.transpose();  // a strided view: the kernels' general path
  auto f = [&] { return relu(at) * at; };
  EXPECT_EQ(with_threads(1, f), with_threads(2, f));
}

}  // namespace
}  // namespace soma
