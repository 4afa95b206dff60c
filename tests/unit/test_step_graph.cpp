// The CUDA-graph bookkeeping of a training step (src/model/step_graph.hpp, issue 23), on the
// CPU: warm-up, capture, replay, invalidation on a new signature, a failed capture, and a
// backend that cannot capture. fit's use of it (FitOptions::cuda_graph) on the CPU stand-in
// device, which cannot capture, trains exactly as without it and says why.
#include <gtest/gtest.h>

#include "../../src/model/step_graph.hpp"
#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"

using namespace soma;
using soma::model::capture::StepAction;
using soma::model::capture::StepGraphPolicy;
using soma::model::capture::StepSignature;

namespace {

StepSignature sig(std::int64_t batch, std::uint64_t opt = 1, DType dt = DType::f32) {
  return {{{batch, 784}, {batch}}, {dt, DType::i64}, Device::cuda(0), opt};
}

std::vector<StepAction> run(StepGraphPolicy& p, const std::vector<StepSignature>& steps) {
  std::vector<StepAction> out;
  for (const auto& s : steps) {
    out.push_back(p.next(s));
    if (out.back() == StepAction::kCapture) p.captured(true);
  }
  return out;
}

constexpr auto E = StepAction::kEager, C = StepAction::kCapture, R = StepAction::kReplay;

TEST(StepGraphPolicy, WarmsUpThenCapturesOnceThenReplays) {
  StepGraphPolicy p("", {.warmup_steps = 3});
  EXPECT_EQ(run(p, {sig(128), sig(128), sig(128), sig(128), sig(128), sig(128)}),
            (std::vector<StepAction>{E, E, E, C, R, R}));
  EXPECT_EQ(p.stats().eager_steps, 3);
  EXPECT_EQ(p.stats().captures, 1);
  EXPECT_EQ(p.stats().replays, 2);
  EXPECT_EQ(p.stats().invalidations, 0);
  EXPECT_EQ(p.stats().reason, "");
}

TEST(StepGraphPolicy, ANewShapeDtypeOrOptimizerStateInvalidates) {
  StepGraphPolicy p("", {.warmup_steps = 1});
  // The last, shorter batch of an epoch: new shapes, so the graph is dropped and warm-up starts
  // over; the next epoch's full batches warm up again too (one graph at a time).
  EXPECT_EQ(run(p, {sig(128), sig(128), sig(128), sig(32), sig(128), sig(128), sig(128)}),
            (std::vector<StepAction>{E, C, R, E, E, C, R}));
  EXPECT_EQ(p.stats().invalidations, 1);
  EXPECT_TRUE(p.take_dropped());
  EXPECT_FALSE(p.take_dropped());
  // The optimiser's values (a new learning rate) and dtypes count as well.
  EXPECT_EQ(run(p, {sig(128, 2), sig(128, 2), sig(128, 2, DType::bf16)}),
            (std::vector<StepAction>{E, C, E}));
  EXPECT_EQ(p.stats().invalidations, 3);
  EXPECT_EQ(p.stats().captures, 3);
}

TEST(StepGraphPolicy, WithoutTheBackendEveryStepIsEagerWithTheReason) {
  StepGraphPolicy p("cpu has no CUDA graphs");
  EXPECT_EQ(run(p, {sig(8), sig(8), sig(8), sig(8), sig(8)}), (std::vector<StepAction>(5, E)));
  EXPECT_EQ(p.stats().eager_steps, 5);
  EXPECT_EQ(p.stats().captures, 0);
  EXPECT_EQ(p.stats().reason, "cpu has no CUDA graphs");
}

TEST(StepGraphPolicy, AFailedCaptureTurnsCaptureOff) {
  StepGraphPolicy p("", {.warmup_steps = 1});
  EXPECT_EQ(p.next(sig(4)), E);
  EXPECT_EQ(p.next(sig(4)), C);
  p.captured(false, "cudaStreamEndCapture: operation not permitted when stream is capturing");
  EXPECT_FALSE(p.has_graph());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.next(sig(4)), E);
  EXPECT_EQ(p.stats().captures, 0);
  EXPECT_NE(p.stats().reason.find("capture failed: cudaStreamEndCapture"), std::string::npos);
}

TEST(StepGraphPolicy, WarmUpOfAtLeastOneStep) {
  StepGraphPolicy p("", {.warmup_steps = 0});  // the first step makes the optimiser's slots
  EXPECT_EQ(run(p, {sig(2), sig(2), sig(2)}), (std::vector<StepAction>{E, C, R}));
}

TEST(StepGraphPolicy, HashOfValues) {
  using soma::model::capture::hash_values;
  EXPECT_EQ(hash_values({1e-3, 2.0}), hash_values({1e-3, 2.0}));
  EXPECT_NE(hash_values({1e-3, 2.0}), hash_values({1e-3, 3.0}));
  EXPECT_NE(hash_values({1e-3}), hash_values({1e-3, 0.0}));
}

TEST(StepGraphFit, OnTheStandInDeviceFitTrainsAsWithoutItAndSaysWhy) {
  const auto data = soma::testing::class_data({6}, 64, 3);
  set_seed(2);
  auto [plain, graphed] = soma::testing::twin_models(soma::testing::small_mlp);
  soma::testing::EmulatedCuda gpu;
  plain->to(gpu.device());
  graphed->to(gpu.device());
  for (auto* m : {&plain, &graphed})
    (*m)->compile(optim::SGD({.learning_rate = 0.1}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
  plain->fit(data.x, data.y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0});
  graphed->fit(data.x, data.y,
               {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0, .cuda_graph = true});
  const auto pa = plain->parameters(), pb = graphed->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(soma::testing::all_close(pb[i].value().to(Device::cpu()),
                                         pa[i].value().to(Device::cpu()), 0.0, 0.0)) << i;
  const auto& st = graphed->step_graph_stats();
  EXPECT_EQ(st.eager_steps, 8);
  EXPECT_EQ(st.captures, 0);
  EXPECT_EQ(st.replays, 0);
  EXPECT_NE(st.reason.find("cannot capture"), std::string::npos) << st.reason;
  // Off (the default): nothing counted.
  EXPECT_EQ(plain->step_graph_stats().eager_steps, 0);
}

}  // namespace
