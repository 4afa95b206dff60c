// The per-op overhead structures of issue 5: the tape's open-addressing set of watched ids, the
// per-thread vector pool behind call_op1 and braced-list call_op, the pooled tensor blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace soma {
namespace {
using testing::all_close;

TEST(OpOverhead, TapeWatchedSetGrowsAndStaysExact) {
  // 600 recorded ops: the watched-id table grows several times (64 slots at first).
  const Tensor x = constant<double>({1.5});
  const Tensor unrelated = constant<double>({2.0});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = x;
  std::vector<Tensor> keep;
  for (int i = 0; i < 600; ++i) {
    y = multiply(y, scalar(1.001, DType::f64));
    keep.push_back(add(unrelated, unrelated));  // not watched: never recorded
  }
  EXPECT_EQ(tape.num_recorded(), 600u);
  const Tensor g = tape.gradient(y, x);
  EXPECT_NEAR(g.item<double>(), std::pow(1.001, 600), 1e-9);
  EXPECT_FALSE(tape.gradient(y, unrelated).defined());  // an unwatched source: no gradient
}

TEST(OpOverhead, TapeResetForgetsWatchedIds) {
  const Tensor x = constant<float>({3.0f});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  (void)multiply(x, x);
  EXPECT_EQ(tape.num_recorded(), 1u);
  tape.reset();
  (void)multiply(x, x);
  EXPECT_EQ(tape.num_recorded(), 0u);  // x is no longer watched
}

TEST(OpOverhead, NestedOpsInsideGradientsReuseNoLiveVector) {
  // Second derivatives: gradient definitions call ops while an outer op's pooled vectors are in
  // use; a vector handed out twice would corrupt the inputs.
  const Tensor x = constant<double>({0.3, -1.2, 2.0});
  GradientTape outer;
  outer.watch(x);
  Tensor dy;
  {
    GradientTape inner;
    inner.watch(x);
    const Tensor y = sum(multiply(multiply(x, x), x));  // sum x^3
    dy = inner.gradient(y, x);                                   // 3 x^2
  }
  const Tensor d2 = outer.gradient(sum(dy), x);  // 6 x
  EXPECT_TRUE(all_close(dy, std::vector<double>{0.27, 4.32, 12.0}, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(d2, std::vector<double>{1.8, -7.2, 12.0}, 1e-12, 1e-12));
}

TEST(OpOverhead, TensorsFreedOnAnotherThreadAndAfterItEnds) {
  // Blocks from one thread's free list freed on another, and a thread's tensors outliving it.
  std::vector<Tensor> made;
  std::thread t([&] {
    for (int i = 0; i < 2000; ++i) made.push_back(add(scalar(1.0f), scalar(float(i))));
  });
  t.join();
  ASSERT_EQ(made.size(), 2000u);
  EXPECT_FLOAT_EQ(made[1999].item<float>(), 2000.0f);
  std::thread u([&] { made.clear(); });
  u.join();
  const Tensor z = add(scalar(1.0f), scalar(2.0f));
  EXPECT_FLOAT_EQ(z.item<float>(), 3.0f);
}

}  // namespace
}  // namespace soma
