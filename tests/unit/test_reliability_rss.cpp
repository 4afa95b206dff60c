// Memory that must not grow without bound (docs/reliability.md): a program that goes through
// many input shapes (predict at batch sizes 1..800) keeps its resident memory bounded, and a
// long-running one (training, then predicting in a loop) keeps it flat. Measured with
// /proc/self/statm on a tiny CNN so that the suite takes a few seconds.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "soma/soma.hpp"
#include "rss_testing.hpp"

using namespace soma;

namespace {

using soma::testing::rss_bytes;

constexpr double kMiB = 1 << 20;

using soma::testing::under_asan;

// One 3x3 convolution with 8 filters on 1x8x8 images, then a classifier.
nn::Sequential tiny_cnn() {
  return nn::Sequential{nn::Input({1, 8, 8}),
                        nn::Conv2D(8, 3, {.padding = "same", .activation = nn::relu}),
                        nn::Flatten(), nn::Dense(10)};
}

// One thread: the suite measures memory, and tiny ops at two threads on a loaded 2-core machine
// spend most of their time waiting for each other.
class Rss : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = get_num_threads();
    set_num_threads(1);
  }
  void TearDown() override { set_num_threads(threads_); }

 private:
  int threads_ = 1;
};

}  // namespace

// Before: every batch size kept its oneDNN primitive with activation-sized blocked buffers and
// scratchpad (64 per thread), and freed tensors of every size stayed in the caching allocator
// (up to 256 MiB): RSS grew with each new shape.
TEST_F(Rss, PredictAtBatchSizesUpToEightHundredStaysUnderTwiceTheRssAfterTen) {
  if (under_asan()) GTEST_SKIP() << "ASan's quarantine keeps freed memory resident";
  auto m = tiny_cnn();
  const Tensor x = random_normal({800, 1, 8, 8}, 0.0, 1.0, DType::f32, 1);
  NoGradScope no_grad;
  long after_ten = 0, peak = 0;
  // Batch sizes 1..10, then every 9th up to 800 (each new shape builds a oneDNN primitive: all
  // 800 would take a minute; the memory a shape keeps grows with the batch size).
  for (std::int64_t b = 1; b <= 800; ++b) {
    Tensor y = m(x.slice(0, 0, b));
    ASSERT_EQ(y.dim(0), b);
    if (b == 10) after_ten = rss_bytes();
    if (b > 10) peak = std::max(peak, rss_bytes());
  }
  const long after = rss_bytes();
  std::printf("RSS after batch sizes 1..10 %.1f MiB, after up to 800 %.1f MiB (peak %.1f MiB)\n",
              after_ten / kMiB, after / kMiB, peak / kMiB);
  EXPECT_LT(after, 2 * after_ten);
  EXPECT_LT(peak, 2 * after_ten);
}

// The same storm through the backward pass (three primitives per shape) stays bounded too.
TEST_F(Rss, TrainingStepsAtBatchSizesUpToFourHundredStayUnderTwiceTheRssAfterTen) {
  if (under_asan()) GTEST_SKIP() << "ASan's quarantine keeps freed memory resident";
  auto m = tiny_cnn();
  m.compile(optim::SGD(), nn::SparseCategoricalCrossentropy({.from_logits = true}));
  const Tensor x = random_normal({400, 1, 8, 8}, 0.0, 1.0, DType::f32, 1);
  const Tensor y = cast(floor(random_uniform({400}, 0.0, 9.999, DType::f32, 2)), DType::i64);
  long after_ten = 0;
  for (std::int64_t b = 1; b <= 400; b += b < 10 ? 1 : 26) {
    m.train_on_batch(x.slice(0, 0, b), y.slice(0, 0, b));
    if (b == 10) after_ten = rss_bytes();
  }
  const long after = rss_bytes();
  std::printf("RSS after batch sizes 1..10 %.1f MiB, after up to 400 %.1f MiB\n", after_ten / kMiB,
              after / kMiB);
  EXPECT_LT(after, 2 * after_ten);
}

// Long-running use stays flat: 50 epochs of training, then 10,000 predicts.
TEST_F(Rss, FiftyEpochsThenTenThousandPredictsKeepRssFlat) {
  if (under_asan()) GTEST_SKIP() << "ASan's quarantine keeps freed memory resident";
  auto m = tiny_cnn();
  m.compile(optim::Adam(), nn::SparseCategoricalCrossentropy({.from_logits = true}),
            {metrics::Accuracy()});
  const Tensor x = random_normal({64, 1, 8, 8}, 0.0, 1.0, DType::f32, 1);
  const Tensor y = cast(floor(random_uniform({64}, 0.0, 9.999, DType::f32, 2)), DType::i64);
  std::vector<long> rss;
  callbacks::LambdaCallback probe;
  probe.on_epoch_end_fn = [&](int, nn::Logs&) { rss.push_back(rss_bytes()); };
  m.fit(x, y, {.epochs = 50, .batch_size = 16, .callbacks = {probe}, .verbose = 0});
  ASSERT_EQ(rss.size(), 50u);
  const Tensor one = x.slice(0, 0, 1);
  long after_warmup = 0;
  for (int i = 0; i < 10000; ++i) {
    Tensor p = m.predict(one, {.batch_size = 1});
    if (i == 99) after_warmup = rss_bytes();
  }
  const long after_predicts = rss_bytes();
  std::printf("RSS epoch 5 %.2f MiB, epoch 50 %.2f MiB; predict 100 %.2f MiB, 10000 %.2f MiB\n",
              rss[4] / kMiB, rss[49] / kMiB, after_warmup / kMiB, after_predicts / kMiB);
  EXPECT_LE(rss[49] - rss[4], 1 << 20) << "training grew RSS";
  EXPECT_LE(after_predicts - after_warmup, 1 << 20) << "predict in a loop grew RSS";
}

// A graph Session kept a plan, and pool buffers of every size, for each feed shape it saw: run at
// 300 batch sizes, it held them all. Past a bound it starts over and drops the idle buffers.
TEST_F(Rss, SessionAtManyFeedShapesKeepsItsBuffersBounded) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 256}, "x");
  Tensor y = relu(x * 2.0f + 1.0f);
  Session sess(g);
  const Tensor xv = random_normal({300, 256}, 0.0, 1.0, DType::f32, 3);
  const std::size_t before = memory_in_use();
  std::size_t after_ten = 0;
  for (std::int64_t b = 1; b <= 300; ++b) {
    Tensor r = sess.run(y, {{x, xv.slice(0, 0, b)}});
    ASSERT_EQ(r.dim(0), b);
    if (b == 10) after_ten = memory_in_use() - before;
  }
  const std::size_t held = memory_in_use() - before;
  std::printf("Session buffers after 10 feed shapes %.2f MiB, after 300 %.2f MiB\n",
              after_ten / kMiB, held / kMiB);
  // A [b, 256] f32 buffer for every b in 1..300 is 44 MiB; sixteen plans' worth at most 5 MiB.
  EXPECT_LT(held, std::size_t(8) << 20);
}
