// Tape nodes take their input/output vectors from a per-thread spare list (issue 5: recording a
// tiny op allocated and freed two small vectors). Reused vectors must start empty, must not keep
// tensors alive after their tape ends, and gradients must not change.
#include <memory>
#include <thread>

#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::rand_tensor;

TEST(TapeReuse, EndedTapesReleaseTheirTensors) {
  // The only holder of x's memory left is the tape's node: it must go with the tape.
  std::weak_ptr<Storage> held;
  {
    GradientTape tape;
    Tensor x = rand_tensor({3}, 1);
    held = x.storage();
    tape.watch(x);
    Tensor y = x * x + x;
    x = Tensor();
    y = Tensor();
    EXPECT_FALSE(held.expired()) << "the tape should hold x while it lives";
  }
  EXPECT_TRUE(held.expired()) << "an ended tape still holds x";
  {
    GradientTape tape(/*persistent=*/true);
    Tensor x = rand_tensor({3}, 2);
    held = x.storage();
    tape.watch(x);
    Tensor z = sin(x);
    x = Tensor();
    z = Tensor();
    EXPECT_FALSE(held.expired());
    tape.reset();
    EXPECT_TRUE(held.expired()) << "reset() kept x";
  }
}

TEST(TapeReuse, GradientsAreRightOnTapesThatReuseVectors) {
  // Many short tapes with ops of different arities, so vectors are reused across arities.
  const Tensor a = rand_tensor({4, 3}, 2), b = rand_tensor({3, 2}, 3), c = rand_tensor({4, 2}, 4);
  for (int round = 0; round < 50; ++round) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(std::vector<Tensor>{a, b, c});
    const Tensor y = sum(where(c > 0.0, matmul(a, b), c) * c) + sum(concat({a, a}, 0));
    const std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{a, b, c});
    const Tensor mask = cast(c > 0.0, DType::f64);
    EXPECT_TRUE(all_close(g[1], matmul(a.transpose(), mask * c), 1e-12, 1e-12)) << round;
    EXPECT_TRUE(all_close(g[0], matmul(mask * c, b.transpose()) + 2.0, 1e-12, 1e-12)) << round;
  }
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return stack({in[0] * in[1], in[1], in[0] - in[1]}, 0); },
      {rand_tensor({2, 3}, 5), rand_tensor({2, 3}, 6)}));
}

TEST(TapeReuse, TapesOnOtherThreadsAndAfterThreadsEnd) {
  const Tensor x = rand_tensor({5}, 7);
  for (int t = 0; t < 4; ++t) {
    std::thread th([&] {
      GradientTape tape;
      tape.watch(x);
      const Tensor g = tape.gradient(sum(x * x), x);
      EXPECT_TRUE(all_close(g, x * 2.0, 1e-12, 1e-12));
    });
    th.join();
  }
}

TEST(TapeReuse, ANewTapeDoesNotInheritTheIdsAnEndedTapeWatched) {
  // Tapes hand their watched-id table and node list on to the next tape of the thread (so that
  // a training step's tape grows nothing); the next tape must start with neither the ids nor
  // the nodes. Enough ops to grow the table several times.
  Tensor x = rand_tensor({2}, 7);
  std::vector<Tensor> made;
  {
    GradientTape tape;
    tape.watch(x);
    Tensor y = x;
    for (int i = 0; i < 300; ++i) {
      y = y * 1.001;
      made.push_back(y);
    }
  }
  for (int round = 0; round < 3; ++round) {
    GradientTape tape;
    EXPECT_EQ(tape.num_recorded(), 0u) << round;
    for (const Tensor& t : made) {
      Tensor z = t * 2.0;
      (void)z;
    }
    EXPECT_EQ(tape.num_recorded(), 0u) << "ops on tensors the ended tape watched were recorded";
    const Tensor w = sum(made.back() * 3.0);
    EXPECT_FALSE(tape.gradient(w, made.back()).defined()) << round;
  }
  // And a tape that does watch gets its gradients as before.
  GradientTape tape;
  tape.watch(x);
  const Tensor y = sum(x * x);
  EXPECT_TRUE(all_close(tape.gradient(y, x), x * 2.0, 1e-12, 1e-12));
}

}  // namespace
}  // namespace soma
