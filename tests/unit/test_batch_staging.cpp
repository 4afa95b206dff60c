// fit/evaluate/predict on a device with batches staged in pinned host memory (issue 22;
// src/model/batch_stager): on the CPU stand-in with its pinned entries
// (EmulatedCuda::kPinned), the staged path must give the CPU's weights and numbers, reuse its two
// buffers, and count exactly one host -> device copy per batch tensor.
#include <gtest/gtest.h>

#include <vector>

#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::EmulatedCuda;

namespace {

using soma::testing::same_weights;
using soma::testing::small_mlp;
using Data = soma::testing::ClassData;
Data make_data(std::int64_t n, std::uint64_t seed) { return soma::testing::class_data({6}, n, seed); }
std::pair<Ref<nn::Model>, Ref<nn::Model>> twin_models() {
  return soma::testing::twin_models(small_mlp);
}

}  // namespace

// (shuffle, sample weights)
class StagedFit : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(StagedFit, GivesTheCpuWeightsWithTwoReusedBuffersAndExactCopies) {
  const auto [shuffle, weighted] = GetParam();
  EmulatedCuda gpu(EmulatedCuda::kPinned);
  auto [cpu, dev] = twin_models();
  dev->to(gpu.device());
  // 37 rows in batches of 8: four full batches and a last one of 5.
  Data d = make_data(37, 3);
  Tensor sw = weighted ? soma::testing::rand_tensor({37}, 9, 0.1, 2.0).cast(DType::f32) : Tensor();
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  model::FitOptions fo{.epochs = 3, .batch_size = 8, .shuffle = shuffle, .sample_weight = sw,
                       .verbose = 0, .seed = 7};
  auto hc = cpu->fit(d.x, d.y, fo);
  EmulatedCuda::pinned_stats() = {};
  cuda::reset_transfer_stats();
  auto hd = dev->fit(d.x, d.y, fo);
  const auto ps = EmulatedCuda::pinned_stats();
  const auto ts = cuda::transfer_stats();

  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  for (const char* k : {"loss", "accuracy"})
    for (std::size_t e = 0; e < 3; ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), hc.history.at(k).at(e), 1e-6) << k << " epoch " << e;

  const unsigned per_batch = weighted ? 3u : 2u;  // x, y (and the weights)
  const unsigned batches = 3 * 5;
  EXPECT_EQ(ps.allocations, 2) << "one pinned buffer per slot, for the whole fit";
  EXPECT_EQ(ps.live, 0) << "the buffers go back at the end";
  EXPECT_EQ(ps.async_copies, int(batches * per_batch)) << "every batch went through staging";
  EXPECT_EQ(ts.host_to_device_copies, batches * per_batch);
  const std::size_t row_bytes = 6 * 4 + 8 + (weighted ? 4 : 0);
  EXPECT_EQ(ts.host_to_device_bytes, 3 * 37 * row_bytes);
  EXPECT_EQ(ps.records, int(batches));
  EXPECT_EQ(ps.unrecorded_waits, 0);
  // Each stage after the first two waits on its slot's last copy; the end waits on both.
  EXPECT_EQ(ps.waits, int(batches) - 2 + 2);
  EXPECT_EQ(ps.events_created, 2);
  EXPECT_EQ(ps.events_destroyed, 2);
}

INSTANTIATE_TEST_SUITE_P(ShuffleAndWeights, StagedFit,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(StagedFit, MatchesThePlainDevicePath) {
  Tensor plain_w, staged_w;
  Data d = make_data(29, 5);
  auto [a, b] = twin_models();
  model::FitOptions fo{.epochs = 2, .batch_size = 6, .verbose = 0, .seed = 1};
  for (auto* m : {&a, &b})
    (*m)->compile(optim::SGD({.learning_rate = 0.1, .momentum = 0.9}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
  {
    EmulatedCuda gpu;  // no pinned entries: Tensor::to per batch
    EmulatedCuda::pinned_stats() = {};
    a->to(gpu.device());
    a->fit(d.x, d.y, fo);
    a->to(Device::cpu());
    EXPECT_EQ(EmulatedCuda::pinned_stats().async_copies, 0);
  }
  {
    EmulatedCuda gpu(EmulatedCuda::kPinned);
    b->to(gpu.device());
    b->fit(d.x, d.y, fo);
    b->to(Device::cpu());
    EXPECT_GT(EmulatedCuda::pinned_stats().async_copies, 0);
  }
  EXPECT_TRUE(same_weights(*a, *b, 0.0));
}

TEST(StagedFit, EvaluateAndPredictStageTheirBatches) {
  EmulatedCuda gpu(EmulatedCuda::kPinned);
  auto [cpu, dev] = twin_models();
  dev->to(gpu.device());
  Data d = make_data(21, 4);
  Tensor sw = soma::testing::rand_tensor({21}, 2, 0.1, 2.0).cast(DType::f32);
  for (auto* m : {&cpu, &dev})
    (*m)->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  auto ec = cpu->evaluate(d.x, d.y, {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  EmulatedCuda::pinned_stats() = {};
  cuda::reset_transfer_stats();
  auto ed = dev->evaluate(d.x, d.y, {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 9u);  // x, y, weights of 3 batches
  EXPECT_EQ(EmulatedCuda::pinned_stats().async_copies, 9);
  EXPECT_EQ(EmulatedCuda::pinned_stats().allocations, 2);
  for (auto& [k, v] : ec) EXPECT_NEAR(ed.at(k), v, 1e-6) << k;

  Tensor pc = cpu->predict(d.x, {.batch_size = 4});
  EmulatedCuda::pinned_stats() = {};
  cuda::reset_transfer_stats();
  Tensor pd = dev->predict(d.x, {.batch_size = 4});
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 6u);  // 6 batches, the last of 1 row
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 1u);
  EXPECT_EQ(EmulatedCuda::pinned_stats().async_copies, 6);
  EXPECT_EQ(EmulatedCuda::pinned_stats().live, 0);
  EXPECT_TRUE(pd.device().is_cpu());
  EXPECT_TRUE(soma::testing::all_close(pd, pc, 1e-6, 1e-6));
}

TEST(StagedFit, LabelChecksReadTheHostCopy) {
  EmulatedCuda gpu(EmulatedCuda::kPinned);
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  Data d = make_data(8, 1);
  Tensor bad = constant(std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 0}, {8});
  cuda::reset_transfer_stats();
  EmulatedCuda::pinned_stats() = {};
  for (bool shuffle : {false, true}) {
    try {
      model->fit(d.x, bad, {.epochs = 1, .batch_size = 4, .shuffle = shuffle, .verbose = 0});
      ADD_FAILURE() << "expected a label range error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 0u);
  EXPECT_GT(EmulatedCuda::pinned_stats().async_copies, 0);
  EXPECT_EQ(EmulatedCuda::pinned_stats().live, 0) << "an exception gives the buffers back";
}

TEST(StagedFit, CpuModelsDoNotStage) {
  EmulatedCuda gpu(EmulatedCuda::kPinned);
  auto model = small_mlp();
  model->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  Data d = make_data(16, 2);
  EmulatedCuda::pinned_stats() = {};
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 4, .verbose = 0});
  model->predict(d.x, {.batch_size = 4});
  EXPECT_EQ(EmulatedCuda::pinned_stats().allocations, 0);
  EXPECT_EQ(EmulatedCuda::pinned_stats().async_copies, 0);
}
