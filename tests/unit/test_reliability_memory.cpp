// Long runs keep resident memory flat (docs/reliability.md): training an MLP for 20 epochs and
// calling predict in a loop must not grow the process's RSS beyond a small bound.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "soma/soma.hpp"
#include "rss_testing.hpp"

using namespace soma;

namespace {

using soma::testing::rss_bytes;

constexpr long kMiB = 1 << 20;
// Allowed growth. The MLP's weights and optimiser state are ~60 KB and one epoch allocates
// ~30 MB in total; a leak of even one small tensor per step would add > 2 MB over 18 epochs.
constexpr long kBound = 2 * kMiB;

void skip_under_asan() {
#ifdef SOMA_UNDER_ASAN
  GTEST_SKIP() << "ASan's quarantine keeps freed memory resident; RSS is measured in the plain "
                  "build (the ASan build checks for leaks itself)";
#endif
}

void make_data(Tensor& x, Tensor& y) {
  x = random_normal({1024, 32}, 0.0, 1.0, DType::f32, 1);
  y = cast(floor(random_uniform({1024}, 0.0, 9.999, DType::f32, 2)), DType::i64);
}

}  // namespace

TEST(Memory, TrainingForTwentyEpochsKeepsRssFlat) {
  skip_under_asan();
  if (IsSkipped()) return;
  Tensor x, y;
  make_data(x, y);
  nn::Sequential m{nn::Input({32}), nn::Dense(64, nn::relu), nn::Dropout(0.1),
                   nn::Dense(64, nn::relu), nn::Dense(10)};
  m.compile(optim::Adam(), nn::SparseCategoricalCrossentropy({.from_logits = true}),
            {metrics::Accuracy()});
  std::vector<long> rss;
  callbacks::LambdaCallback probe;
  probe.on_epoch_end_fn = [&](int, nn::Logs&) { rss.push_back(rss_bytes()); };
  m.fit(x, y, {.epochs = 20, .batch_size = 32, .validation_split = 0.1,
               .callbacks = {probe}, .verbose = 0});
  ASSERT_EQ(rss.size(), 20u);
  const long growth = rss[19] - rss[1];
  std::printf("RSS after epoch 2: %.2f MiB, after epoch 20: %.2f MiB, growth %+.3f MiB\n",
              double(rss[1]) / kMiB, double(rss[19]) / kMiB, double(growth) / kMiB);
  EXPECT_LE(growth, kBound) << "RSS grew from " << rss[1] << " to " << rss[19] << " bytes";
}

TEST(Memory, PredictInALoopKeepsRssFlat) {
  skip_under_asan();
  if (IsSkipped()) return;
  Tensor x, y;
  make_data(x, y);
  nn::Sequential m{nn::Input({32}), nn::Dense(64, nn::relu), nn::Dense(10)};
  long after_warmup = 0;
  for (int i = 0; i < 300; ++i) {
    Tensor p = m.predict(x, {.batch_size = 128});
    ASSERT_EQ(p.dim(0), 1024);
    if (i == 19) after_warmup = rss_bytes();
  }
  const long growth = rss_bytes() - after_warmup;
  std::printf("predict x300: RSS growth after the first 20 calls %+.3f MiB\n", double(growth) / kMiB);
  EXPECT_LE(growth, kBound);
}
