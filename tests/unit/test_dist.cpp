// soma::dist without a launcher (world size 1) and the pieces of data-parallel training that need
// no second process: the tape's gradient-ready hook, the gradient reducer's buckets and scaling,
// batch sharding, and fit({.distributed = true}) on one process. The multi-rank tests are in
// tests/dist (they run mpirun).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "soma/dist/data_parallel.hpp"
#include "soma/dist/dist.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::rand_tensor;

namespace {

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.cast(DType::f64) - b.cast(DType::f64))).item<double>();
}

}  // namespace

// ---- process group --------------------------------------------------------------------------

TEST(DistInit, WithoutLauncherIsOneProcess) {
  dist::init();
  EXPECT_TRUE(dist::initialized());
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_TRUE(dist::is_main());
  EXPECT_EQ(dist::world().backend(), "local");
  dist::init();  // again: nothing happens
  EXPECT_EQ(dist::world_size(), 1);
}

TEST(DistInit, WorldBeforeInitNamesTheFix) {
  dist::finalize();
  EXPECT_FALSE(dist::initialized());
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_EQ(error_of([] { dist::world(); }),
            "dist.world: soma::dist::init() has not been called (call it at the start of main)");
  dist::init();
}

TEST(DistInit, BadTimeoutIsRefused) {
  dist::finalize();
  EXPECT_EQ(error_of([] { dist::init({.timeout = std::chrono::milliseconds(0)}); }),
            "dist.init: the timeout must be positive");
  dist::init();
}

TEST(DistInit, LauncherWithoutMpiInTheBuildIsRefused) {
  if (dist::built_with_mpi()) GTEST_SKIP() << "libsoma has MPI: mpirun ranks are supported";
  dist::finalize();
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  const std::string msg = error_of([] { dist::init(); });
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_TRUE(contains(msg, "dist.init: this process is one of 2 ranks started by mpirun, but "
                            "libsoma was built without MPI"))
      << msg;
  dist::init();
  EXPECT_EQ(dist::world_size(), 1);
}

TEST(LocalCommunicator, CollectivesLeaveTheTensor) {
  auto c = dist::make_local_communicator();
  Tensor t = constant<float>({1, 2, 3});
  c->allreduce(t);
  c->broadcast(t, 0);
  c->allreduce_async(t)->wait();
  c->barrier();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(LocalCommunicator, NonContiguousTensorIsRefused) {
  auto c = dist::make_local_communicator();
  Tensor t = zeros({3, 4}).transpose();
  EXPECT_TRUE(contains(error_of([&] { c->allreduce(t); }),
                       "dist.allreduce: the tensor (shape [4, 3]) is not contiguous"));
  EXPECT_EQ(error_of([&] {
              Tensor u = zeros({2});
              c->broadcast(u, 1);
            }),
            "dist.broadcast: root must be in [0, 1), got 1");
}

TEST(ShardRange, SplitsContiguouslyWithSizesDifferingByOne) {
  EXPECT_EQ(dist::shard_range(64, 0, 2), (std::pair<std::int64_t, std::int64_t>{0, 32}));
  EXPECT_EQ(dist::shard_range(64, 1, 2), (std::pair<std::int64_t, std::int64_t>{32, 64}));
  EXPECT_EQ(dist::shard_range(64, 0, 3), (std::pair<std::int64_t, std::int64_t>{0, 21}));
  EXPECT_EQ(dist::shard_range(64, 1, 3), (std::pair<std::int64_t, std::int64_t>{21, 42}));
  EXPECT_EQ(dist::shard_range(64, 2, 3), (std::pair<std::int64_t, std::int64_t>{42, 64}));
  EXPECT_EQ(error_of([] { dist::shard_range(8, 2, 2); }),
            "dist.shard_range: rank 2 is not in [0, 2)");
}

TEST(AverageOverRanks, OneRankReturnsItsValues) {
  auto c = dist::make_local_communicator();
  auto out = dist::average_over_ranks(*c, {{"loss", 0.5}, {"accuracy", 0.25}}, 7.0);
  EXPECT_EQ(out.at("loss"), 0.5);
  EXPECT_EQ(out.at("accuracy"), 0.25);
}

// ---- the tape's gradient-ready hook ---------------------------------------------------------

TEST(GradientReadyHook, ReportsEachSourceOnceWithItsFinalGradient) {
  Variable w1(rand_tensor({3, 4}, 1), "w1"), w2(rand_tensor({4, 2}, 2), "w2"),
      unused(rand_tensor({2}, 3), "unused");
  Tensor x = rand_tensor({5, 3}, 4);
  GradientTape tape;
  Tensor loss = sum(square(matmul(tanh(matmul(x, w1.value())), w2.value())));
  std::vector<std::size_t> order;
  std::vector<Tensor> seen(3);
  tape.set_gradient_ready_hook([&](std::size_t i, const Tensor& g) {
    order.push_back(i);
    seen[i] = g;
  });
  auto grads = tape.gradient(loss, std::vector<Variable>{w1, w2, unused});
  // w2 is used last in the forward pass, so the backward pass finishes it first; the unused
  // variable is reported (without a gradient) at the end.
  EXPECT_EQ(order, (std::vector<std::size_t>{1, 0, 2}));
  EXPECT_EQ(max_diff(seen[0], grads[0]), 0.0);
  EXPECT_EQ(max_diff(seen[1], grads[1]), 0.0);
  EXPECT_FALSE(seen[2].defined());
  EXPECT_FALSE(grads[2].defined());
}

TEST(GradientReadyHook, ReportsWhileTheBackwardPassStillRuns) {
  // w2's gradient is final after the first replayed node; the hook sees it before w1's exists.
  Variable w1(rand_tensor({3, 3}, 1), "w1"), w2(rand_tensor({3, 3}, 2), "w2");
  Tensor x = rand_tensor({2, 3}, 3);
  GradientTape tape;
  Tensor loss = sum(matmul(matmul(x, w1.value()), w2.value()));
  int reports_before_w1 = -1, n = 0;
  tape.set_gradient_ready_hook([&](std::size_t i, const Tensor&) {
    if (i == 0) reports_before_w1 = n;
    ++n;
  });
  tape.gradient(loss, std::vector<Variable>{w1, w2});
  EXPECT_EQ(reports_before_w1, 1);
}

TEST(GradientReadyHook, VariableUsedTwiceIsReportedAfterItsFirstUse) {
  Variable w(rand_tensor({2, 2}, 1), "w");
  Tensor x = rand_tensor({2, 2}, 2);
  GradientTape tape;
  Tensor loss = sum(matmul(matmul(x, w.value()), w.value()));
  Tensor seen;
  int calls = 0;
  tape.set_gradient_ready_hook([&](std::size_t, const Tensor& g) {
    seen = g;
    ++calls;
  });
  Tensor g = tape.gradient(loss, w);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(max_diff(seen, g), 0.0);  // both uses summed before the report
}

TEST(GradientReadyHook, ZeroModeReportsZeros) {
  Variable w(rand_tensor({2}, 1), "w"), unused(rand_tensor({3}, 2), "unused");
  GradientTape tape;
  Tensor loss = sum(w.value() * 2.0);
  Tensor seen;
  tape.set_gradient_ready_hook([&](std::size_t i, const Tensor& g) {
    if (i == 1) seen = g;
  });
  tape.gradient(loss, std::vector<Variable>{w, unused}, UnconnectedGradients::Zero);
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(seen.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

// ---- GradientReducer ------------------------------------------------------------------------

TEST(GradientReducer, BucketsFollowTheByteBudgetInReverseOrder) {
  std::vector<Variable> vars = {Variable(zeros({100}), "a"), Variable(zeros({100}), "b"),
                                Variable(zeros({300}), "c"),
                                Variable(zeros({10}, DType::f64), "d")};
  auto c = dist::make_local_communicator();
  // 800 bytes: d (f64) alone; c (1200 bytes) alone; b + a (400 + 400).
  dist::GradientReducer r(c, vars, {.bucket_bytes = 800});
  EXPECT_EQ(r.num_buckets(), 3u);
  dist::GradientReducer per_param(c, vars, {.bucket_bytes = 0});
  EXPECT_EQ(per_param.num_buckets(), 4u);
}

TEST(GradientReducer, ScalesByTheRanksShareAndKeepsShapes) {
  std::vector<Variable> vars = {Variable(zeros({2, 3}), "a"), Variable(zeros({4}), "b"),
                                Variable(zeros({2}), "none")};
  dist::GradientReducer r(dist::make_local_communicator(), vars, {.bucket_bytes = 16});
  r.begin_step(0.25);
  Tensor ga = rand_tensor({3, 2}, 1).transpose();  // non-contiguous: copied
  Tensor gb = rand_tensor({4}, 2);
  r.gradient_ready(1, gb);
  r.gradient_ready(2, Tensor());
  r.gradient_ready(0, ga);
  auto out = r.finish_step();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_LT(max_diff(out[0], ga * 0.25), 1e-7);
  EXPECT_LT(max_diff(out[1], gb * 0.25), 1e-7);
  EXPECT_FALSE(out[2].defined());
}

TEST(GradientReducer, OverlapStartsBucketsAsGradientsArriveOnlyWhenAsked) {
  std::vector<Variable> vars = {Variable(zeros({4}), "a"), Variable(zeros({4}), "b")};
  for (bool overlap : {true, false}) {
    dist::GradientReducer r(dist::make_local_communicator(), vars,
                            {.bucket_bytes = 0, .overlap = overlap});
    r.begin_step(1.0);
    r.gradient_ready(1, ones({4}));
    r.gradient_ready(0, ones({4}) * 2.0);
    auto out = r.finish_step();
    EXPECT_EQ(r.stats().started_during_backward, overlap ? 2 : 0);
    EXPECT_EQ(r.stats().gradients_pending_at_first_start, overlap ? 1 : 0);
    EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
    EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  }
}

TEST(GradientReducer, MisuseNamesTheProblem) {
  std::vector<Variable> vars = {Variable(zeros({2}), "a"), Variable(zeros({2}), "b")};
  dist::GradientReducer r(dist::make_local_communicator(), vars);
  EXPECT_EQ(error_of([&] { r.gradient_ready(0, zeros({2})); }),
            "dist.GradientReducer: gradient_ready outside a step (call begin_step first)");
  r.begin_step(1.0);
  r.gradient_ready(0, zeros({2}));
  EXPECT_EQ(error_of([&] { r.gradient_ready(0, zeros({2})); }),
            "dist.GradientReducer: the gradient of parameter 0 was reported twice");
  EXPECT_TRUE(contains(error_of([&] { r.gradient_ready(1, zeros({3})); }),
                       "the gradient of 'b' has shape [3], the parameter [2]"));
  EXPECT_TRUE(contains(error_of([&] { r.finish_step(); }),
                       "the gradient of parameter 1 ('b') was never reported"));
  std::vector<Variable> half = {Variable(zeros({2}, DType::f16), "h")};
  EXPECT_TRUE(
      contains(error_of([&] { dist::GradientReducer(dist::make_local_communicator(), half); }),
               "parameter 'h' has dtype f16; data-parallel training reduces f32 and f64"));
}

// ---- fit({.distributed = true}) on one process ----------------------------------------------

TEST(DistributedFit, OneProcessTrainsLikePlainFit) {
  auto train = [](bool distributed) {
    set_seed(11);
    nn::Sequential m{nn::Dense(8, nn::relu), nn::Dense(3)};
    m.compile(optim::Adam({.learning_rate = 0.01}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()});
    Tensor x = rand_tensor({96, 5}, 1);
    Tensor y = argmax(matmul(x, rand_tensor({5, 3}, 2)), -1);
    nn::FitOptions o{.epochs = 2, .batch_size = 32};
    o.verbose = 0;
    o.seed = 3;
    o.distributed = distributed;
    o.validation_data = nn::ValidationData(x, y);
    auto h = m.fit(x, y, o);
    std::vector<float> w;
    for (auto& [n, v] : m.named_parameters(true))
      for (float f : v.value().to_vector<float>()) w.push_back(f);
    return std::make_pair(w, h["val_loss"].back());
  };
  auto [plain, plain_loss] = train(false);
  auto [dist_w, dist_loss] = train(true);
  EXPECT_EQ(plain, dist_w);
  EXPECT_EQ(plain_loss, dist_loss);
}

TEST(DistributedFit, NegativeBucketSizeIsRefused) {
  nn::Sequential m{nn::Dense(2)};
  m.compile(optim::SGD(), nn::MeanSquaredError());
  nn::FitOptions o;
  o.verbose = 0;
  o.distributed = true;
  o.distributed_bucket_bytes = -1;
  EXPECT_EQ(error_of([&] { m.fit(zeros({4, 2}), zeros({4, 2}), o); }),
            "fit: distributed_bucket_bytes must be >= 0, got -1");
}
