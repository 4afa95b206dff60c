// soma used from several threads at once (docs/reliability.md). Written for ThreadSanitizer
// (scripts/sanitizers.sh tsan), and a plain check of the results in every build.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {
constexpr int kThreads = 4;

template <class F>
void run_threads(F f) {
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) ts.emplace_back(f, i);
  for (auto& t : ts) t.join();
}
}  // namespace

TEST(Threads, GlobalRngHandsEveryCallItsOwnStream) {
  set_seed(77);
  std::vector<std::vector<float>> firsts(kThreads);
  run_threads([&](int i) {
    for (int k = 0; k < 50; ++k) firsts[i].push_back(random_uniform({4}).to_vector<float>()[0]);
  });
  EXPECT_EQ(get_rng_state().calls, std::uint64_t(kThreads * 50));
  std::set<float> distinct;
  for (auto& v : firsts) distinct.insert(v.begin(), v.end());
  EXPECT_EQ(distinct.size(), std::size_t(kThreads * 50));  // no stream was handed out twice
}

TEST(Threads, OpsAndTapesOnSeveralThreadsMatchTheSerialResult) {
  auto work = [](int i) {
    Tensor x = soma::testing::rand_tensor({32, 32}, std::uint64_t(i + 1));
    GradientTape tape;
    tape.watch(x);
    Tensor y = sum(log(exp(matmul(x, transpose(x))) + 1.0));
    return tape.gradient(y, x);
  };
  std::vector<Tensor> serial, parallel(kThreads);
  for (int i = 0; i < kThreads; ++i) serial.push_back(work(i));
  run_threads([&](int i) { parallel[i] = work(i); });
  for (int i = 0; i < kThreads; ++i) EXPECT_TRUE(soma::testing::all_close(parallel[i], serial[i], 0, 0));
}

TEST(Threads, SettingsChangeWhileOpsRun) {
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    for (int k = 0; !stop; ++k) {
      set_check_numerics(k % 2 == 0);
      set_max_allocation_bytes(k % 2 ? 0 : std::size_t(1) << 30);
      std::this_thread::yield();
    }
  });
  run_threads([](int i) {
    for (int k = 0; k < 200; ++k) (void)sqrt(fill({64}, double(i + k + 1)));  // always finite
  });
  stop = true;
  toggler.join();
  set_check_numerics(false);
  set_max_allocation_bytes(0);
}

TEST(Threads, ModelsTrainOnSeveralThreads) {
  std::vector<float> losses(kThreads);
  run_threads([&](int i) {
    nn::Sequential m{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(1)};
    m.compile(optim::Adam(), nn::MeanSquaredError());
    Tensor x = random_normal({64, 4}, 0.0, 1.0, DType::f32, std::uint64_t(i));
    Tensor y = sum(x, {1}, true);
    auto h = m.fit(x, y, {.epochs = 3, .batch_size = 16, .verbose = 0, .seed = 1});
    losses[i] = float(h.history.at("loss").back());
  });
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
}
