// Graph mode at run time: random ops that draw anew at every run (tracing, sessions, Dropout
// under jit), losses over an unknown batch, check_numerics naming the graph node.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../../src/internal/cpu_allocator.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

template <class F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Tensor f32(const Tensor& t) { return t.cast(DType::f32); }

bool same(const Tensor& a, const Tensor& b) { return all_close(a, b, 0, 0); }

// Bit for bit (NaNs and signed zeros included), not just numerically equal.
bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  const std::size_t bytes = std::size_t(ca.numel()) * dtype_size(ca.dtype());
  return std::memcmp(ca.raw_data(), cb.raw_data(), bytes) == 0;
}

// Fused outputs of at least 16 MB (4M floats) are written with streaming stores.
constexpr std::int64_t kStreamed = (std::int64_t(16) << 20) / 4 + 37;

Tensor rows(const Tensor& t, std::int64_t start, std::int64_t n) {
  return slice(t, {Slice{start, start + n}});
}

}  // namespace

// ---- random ops ---------------------------------------------------------------------------------
TEST(GraphRandom, TracedFunctionDrawsAnewAtEveryCallFromTheEagerSequence) {
  Tensor xv = f32(rand_tensor({4, 5}, 1));
  set_seed(11);
  Tensor e1 = xv + random_uniform_like(xv);
  Tensor e2 = xv + random_normal_like(xv);
  set_seed(11);
  Function f = function([](const Tensor& x) { return x + random_uniform_like(x); });
  Function g = function([](const Tensor& x) { return x + random_normal_like(x); });
  Tensor t1 = f(xv);  // traces (draws nothing), then runs: the first global stream
  Tensor t2 = g(xv);
  EXPECT_TRUE(same(t1, e1));
  EXPECT_TRUE(same(t2, e2));
  Tensor t3 = f(xv);
  EXPECT_EQ(f.num_traces(), 1u);
  EXPECT_FALSE(all_close(t3, t1, 1e-3, 0));  // a new draw, not a value frozen by the trace
}

TEST(GraphRandom, SessionRunsDrawAnewAndASeededNodeStartsWithTheEagerValues) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 3}, "x");
  Tensor u = random_uniform_like(x);
  Tensor n = truncated_normal_like(x, 1.0, 2.0, 42);
  Session sess(g);
  Tensor xv = zeros({6, 3});
  auto r1 = sess.run({u, n}, {{x, xv}});
  auto r2 = sess.run({u, n}, {{x, xv}});
  EXPECT_EQ(r1[0].shape(), (Shape{6, 3}));
  EXPECT_FALSE(all_close(r1[0], r2[0], 1e-3, 0));
  EXPECT_FALSE(all_close(r1[1], r2[1], 1e-3, 0));
  EXPECT_TRUE(same(r1[1], truncated_normal({6, 3}, 1.0, 2.0, DType::f32, 42)));
  // Random nodes are neither merged (CSE) nor folded.
  EXPECT_EQ(sess.stats().cse_nodes, 0);
  for (float v : r1[1].to_vector<float>()) EXPECT_LT(std::abs(v - 1.0f), 4.0f);
}

TEST(GraphRandom, TwoEqualRandomNodesAreNotMerged) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {100}, "x");
  Tensor d = random_uniform_like(x) - random_uniform_like(x);
  Session sess(g);
  Tensor r = sess.run(d, {{x, zeros({100})}});
  EXPECT_GT(max(abs(r)).item<double>(), 0.0);
}

TEST(GraphRandom, RandomOpsHaveNoGradientAndDropoutsFlowsThroughTheMask) {
  nn::Dropout drop(0.5, 3);
  drop.train(true);
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 8}, "x");
  Tensor y = drop(x);
  Tensor gx = gradients(sum(y * 3.0), x);
  Tensor r = gradients(sum(random_uniform_like(x)), x);
  Session sess(g);
  Tensor xv = f32(rand_tensor({5, 8}, 2, 0.5, 1.5));
  auto out = sess.run({y, gx, r}, {{x, xv}});
  // dy/dx is the scaled mask: 2 where y kept x, 0 where it dropped it.
  Tensor mask = cast(not_equal(out[0], zeros_like(out[0])), DType::f32);
  EXPECT_TRUE(all_close(out[1], mask * 6.0, 1e-6, 1e-6));
  EXPECT_EQ(sum(abs(out[2])).item<double>(), 0.0);  // unconnected: zeros
}

TEST(GraphRandom, LikeOfUndefinedTensorIsAnError) {
  EXPECT_NE(what_of([] { random_uniform_like(Tensor()); }).find("random_uniform: the tensor"),
            std::string::npos);
  EXPECT_NE(what_of([] { random_normal_like(zeros({2}, DType::i32)); })
                .find("random_normal: dtype i32 is not supported"),
            std::string::npos);
}

namespace {
std::vector<double> fit_losses(bool jit, std::optional<std::uint64_t> drop_seed) {
  Tensor xs = f32(rand_tensor({64, 12}, 91));
  Tensor ys = cast(argmax(rand_tensor({64, 3}, 92), 1), DType::i64);
  set_seed(9);
  nn::Sequential m{nn::Dense(16, nn::relu), nn::Dropout(0.3, drop_seed), nn::Dense(16, nn::relu),
                   nn::Dropout(0.2), nn::Dense(3)};
  m.compile(optim::Adam({.learning_rate = 0.01}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.jit = jit});
  std::vector<double> losses;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto h = m.fit(xs, ys, {.epochs = 1, .batch_size = 16, .verbose = 0, .seed = 1});
    losses.push_back(h.history.at("loss").back());
  }
  return losses;
}
}  // namespace

// Dropout's masks come from random ops in the traced step, drawn at every run in the eager
// order: jit training with Dropout equals eager training step by step.
TEST(GraphRandom, JitDropoutTrainingEqualsEager) {
  for (auto seed : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{7}}) {
    auto le = fit_losses(false, seed);
    auto lj = fit_losses(true, seed);
    ASSERT_EQ(le.size(), lj.size());
    for (std::size_t i = 0; i < le.size(); ++i)
      EXPECT_NEAR(lj[i], le[i], 1e-5) << "epoch " << i << (seed ? " seeded" : "");
  }
}

// ---- unknown batch ------------------------------------------------------------------------------
// The losses' mean over the batch is taken when the graph runs, so an MLP trains in a Session
// fed batches of any size (here 32, 32 and a last partial 16), weighted or not.
TEST(GraphUnknownBatch, MlpTrainsOnBatchesOfAnySizeLikeEager) {
  Tensor xs = f32(rand_tensor({80, 784}, 5));
  Tensor ys = cast(argmax(rand_tensor({80, 10}, 6), 1), DType::i64);
  Tensor ws = f32(rand_tensor({80}, 7, 0.5, 2.0));
  for (bool weighted : {false, true}) {
    set_seed(3);
    auto make = [] {
      return nn::Sequential{nn::Dense(32, nn::relu), nn::Dropout(0.25), nn::Dense(10)};
    };
    nn::Sequential a = make(), b = make();
    a(xs);
    b(xs);
    b.load_state_dict(a.state_dict());
    a.train(true);
    b.train(true);
    auto loss_fn = nn::SparseCategoricalCrossentropy({.from_logits = true});
    const std::int64_t starts[] = {0, 32, 64}, sizes[] = {32, 32, 16};
    set_seed(21);
    optim::Adam eopt({.learning_rate = 0.01});
    std::vector<double> eager;
    for (int s = 0; s < 3; ++s) {
      Tensor xb = rows(xs, starts[s], sizes[s]);
      Tensor yb = rows(ys, starts[s], sizes[s]);
      Tensor wb = rows(ws, starts[s], sizes[s]);
      GradientTape tape;
      Tensor l = weighted ? loss_fn(yb, a(xb), wb) : loss_fn(yb, a(xb));
      auto vars = a.trainable_parameters();
      eopt.apply_gradients(tape.gradient(l, vars), vars);
      eager.push_back(l.item<double>());
    }
    Graph g;
    Tensor x, y, w, l, train;
    {
      GraphScope scope(g);
      x = g.placeholder(DType::f32, {-1, 784}, "x");
      y = g.placeholder(DType::i64, {-1}, "y");
      w = g.placeholder(DType::f32, {-1}, "w");
      l = weighted ? loss_fn(y, b(x), w) : loss_fn(y, b(x));
      train = minimize(std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01}),
                       l, b.trainable_parameters());
    }
    EXPECT_EQ(g.node_of(l).outputs[0].shape, Shape{});
    Session sess(g);
    set_seed(21);
    for (int s = 0; s < 3; ++s) {
      Feeds feeds{{x, rows(xs, starts[s], sizes[s])},
                  {y, rows(ys, starts[s], sizes[s])}};
      if (weighted) feeds.push_back({w, rows(ws, starts[s], sizes[s])});
      auto out = sess.run({l, train}, feeds);
      EXPECT_NEAR(out[0].item<double>(), eager[std::size_t(s)], 1e-5)
          << "step " << s << (weighted ? " weighted" : "");
    }
    EXPECT_EQ(sess.stats().plans, 2);  // batch 32, then 16
  }
}

TEST(GraphUnknownBatch, MeanLossesOfAnUnknownBatchUseTheFedBatch) {
  Graph g;
  Tensor yt = g.placeholder(DType::f32, {-1, 2}, "yt");
  Tensor yp = g.placeholder(DType::f32, {-1, 2}, "yp");
  Tensor l1 = nn::MeanSquaredError()(yt, yp);
  Tensor l2 = nn::CategoricalCrossentropy({.from_logits = true})(yt, yp);
  Session sess(g);
  for (std::int64_t n : {3, 7}) {
    Tensor a = f32(rand_tensor({n, 2}, 8)), b = f32(rand_tensor({n, 2}, 9));
    auto out = sess.run({l1, l2}, {{yt, a}, {yp, b}});
    EXPECT_NEAR(out[0].item<double>(), nn::MeanSquaredError()(a, b).item<double>(), 1e-6);
    EXPECT_NEAR(out[1].item<double>(),
                nn::CategoricalCrossentropy({.from_logits = true})(a, b).item<double>(), 1e-6);
  }
}

// ---- check_numerics -----------------------------------------------------------------------------
namespace {
struct NumericsOn {
  NumericsOn() { set_check_numerics(true); }
  ~NumericsOn() { set_check_numerics(false); }
};
}  // namespace

TEST(GraphNumerics, FirstBadNodeOfAFusedChainIsNamed) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor y;
  {
    auto s = name_scope("chain");
    y = exp(log(x - 1.0) * 2.0) + 3.0;  // log of a negative number: nan
  }
  Session sess(g);
  Tensor ok = f32(rand_tensor({50000}, 3, 2.0, 3.0));
  Tensor bad = ok.clone();
  bad.data<float>()[40000] = 0.5f;
  Tensor expect = exp(log(ok - 1.0) * 2.0) + 3.0;
  EXPECT_TRUE(all_close(sess.run(y, {{x, ok}}), expect, 1e-6, 1e-6));  // off: no check
  EXPECT_GT(sess.stats().fused_nodes, 0);
  NumericsOn on;
  EXPECT_TRUE(all_close(sess.run(y, {{x, ok}}), expect, 1e-6, 1e-6));
  std::string msg = what_of([&] { sess.run(y, {{x, bad}}); });
  EXPECT_NE(msg.find("graph node 'chain/log' (log)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("produced nan at flat index 40000"), std::string::npos) << msg;
}

TEST(GraphNumerics, SingleNodeAndTracedFunctionAreChecked) {
  Graph g;
  Tensor a = g.placeholder(DType::f32, {2, 2}, "a");
  Tensor b = g.placeholder(DType::f32, {2, 2}, "b");
  Tensor q = matmul(a, b) / b;
  Session sess(g);
  NumericsOn on;
  Tensor av = ones({2, 2}), bv = ones({2, 2});
  bv.data<float>()[3] = 0.0f;
  std::string msg = what_of([&] { sess.run(q, {{a, av}, {b, bv}}); });
  EXPECT_NE(msg.find("graph node 'divide' (divide)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("produced inf"), std::string::npos) << msg;
  Function f = function([](const Tensor& x) { return sqrt(x); });
  msg = what_of([&] { f(constant<float>({1.f, -1.f})); });
  EXPECT_NE(msg.find("graph node 'sqrt' (sqrt)"), std::string::npos) << msg;
}

// ---- fused f32 chains ---------------------------------------------------------------------------
// Inline block loops (add ... sqrt, relu) and ops run by their kernel on a block (exp, tanh)
// give exactly the unfused results, for sizes that are not a multiple of the block.
TEST(GraphFusion, FusedF32ChainEqualsUnfused) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor y = g.placeholder(DType::f32, {-1}, "y");
  Tensor a = relu(negative(sqrt(abs(x * 0.5 + 1.0)) * 2.0 - 0.5));
  Tensor b = tanh(exp(square(x / y) - reciprocal(y)) * x) - 2.0 / y;
  Session fused(g), plain(g, {.optimize = false});
  for (std::int64_t n : {1, 7, 2048, 100003}) {
    Tensor xv = f32(rand_tensor({n}, 4, -2, 2)), yv = f32(rand_tensor({n}, 5, 0.5, 2));
    auto f = fused.run({a, b}, {{x, xv}, {y, yv}});
    auto u = plain.run({a, b}, {{x, xv}, {y, yv}});
    EXPECT_TRUE(same(f[0], u[0])) << n;
    EXPECT_TRUE(same(f[1], u[1])) << n;
  }
  EXPECT_GE(fused.stats().fused_nodes, 8);
}

// Every inline op (array and scalar operands on either side) in chains that run on registers,
// chains with a kernel op (exp, tanh; one of them last), on special values (NaN, infinities,
// signed zeros, denormals), an input that starts off the vector alignment, sizes around the
// register group, and outputs large enough for streaming stores: bit for bit the unfused result.
TEST(GraphFusion, RegisterChainsAndStreamedOutputsAreBitIdenticalToUnfused) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor y = g.placeholder(DType::f32, {-1}, "y");
  std::vector<Tensor> chains = {
      relu(negative(abs(x)) + y),               // abs, neg, add (array), relu
      relu(negative(x)),                        // relu of -0 is +0, of NaN NaN
      sqrt(x * y) / y,                          // mul, sqrt, div (array)
      reciprocal(square(x)) - 3.0,              // square, reciprocal, sub (scalar)
      2.0 / (3.0 - x),                          // scalar on the left of sub and div
      (y - x) * relu(x * 0.5 + 1.0),            // array on the left of sub, mul of two arrays
      tanh(x * 0.25) + y,                       // a kernel op inside
      exp(x * 0.1 - y)};                        // a kernel op last
  Session fused(g), plain(g, {.optimize = false});
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = {nan,   -nan,   inf, -inf, 0.f, -0.f,
                                      1e-40f, -1e-40f, 1.f, -1.f, 4.f};
  for (std::int64_t n : std::vector<std::int64_t>{5, 127, 128, 129, 2048 * 3 + 17, kStreamed}) {
    // x starts one element into a buffer: its vector loads are not 64-byte aligned.
    Tensor big = f32(rand_tensor({n + 1}, 7, -3, 3));
    float* b = big.data<float>();
    for (std::size_t i = 0; i < special.size() && i < std::size_t(n); ++i)
      b[1 + std::int64_t(i) * 3 % n] = special[i];
    Tensor xv = rows(big, 1, n);
    Tensor yv = f32(rand_tensor({n}, 8, -2, 2));
    yv.data<float>()[0] = -0.f;
    auto f = fused.run(chains, {{x, xv}, {y, yv}});
    auto u = plain.run(chains, {{x, xv}, {y, yv}});
    for (std::size_t c = 0; c < chains.size(); ++c)
      EXPECT_TRUE(bits_equal(f[c], u[c])) << "chain " << c << ", n = " << n;
  }
  EXPECT_EQ(plain.stats().fused_nodes, 0);
  EXPECT_GE(fused.stats().fused_nodes / fused.stats().plans, 19);
}

// The executor reuses an output buffer only once the caller let go of it: a result kept from
// one run is not overwritten by the next, and a result dropped is reused (no allocation).
TEST(GraphFusion, HeldResultIsNotReusedAndADroppedOneIs) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor y = sqrt(abs(x * 0.5 + 1.0)) * 2.0 - 0.5;
  for (std::int64_t n : {std::int64_t(1000), kStreamed}) {
    Session sess(g), plain(g, {.optimize = false});
    Tensor xa = f32(rand_tensor({n}, 11, -3, 3)), xb = f32(rand_tensor({n}, 12, -3, 3));
    Tensor expect_a = plain.run(y, {{x, xa}}), expect_b = plain.run(y, {{x, xb}});
    ASSERT_FALSE(bits_equal(expect_a, expect_b));
    Tensor ra = sess.run(y, {{x, xa}});
    Tensor rb = sess.run(y, {{x, xb}});  // ra is held: rb needs a buffer of its own
    EXPECT_EQ(sess.stats().last_run_allocations, 1) << n;
    EXPECT_NE(ra.storage(), rb.storage());
    EXPECT_TRUE(bits_equal(ra, expect_a)) << n;
    EXPECT_TRUE(bits_equal(rb, expect_b)) << n;
    ra = Tensor();  // let go: the next run takes its buffer
    Tensor rc = sess.run(y, {{x, xa}});
    EXPECT_EQ(sess.stats().last_run_allocations, 0) << n;
    EXPECT_TRUE(bits_equal(rc, expect_a)) << n;
    EXPECT_TRUE(bits_equal(rb, expect_b)) << n;
  }
}

// "A training step allocates nothing after the first": the session's pool covers the graph's
// buffers (SessionStats, GraphPasses.SecondRunAllocatesNoBuffers); here the whole traced step,
// the optimiser's update included, asks the CPU allocator for no tensor memory at all once
// warmed up (every allocation would count as a hit or a miss of its cache).
TEST(GraphMemory, JitTrainingStepTakesNoNewTensorMemoryAfterWarmUp) {
  if (!detail::cpu_cache_enabled()) GTEST_SKIP() << "the CPU buffer cache is off (SOMA_CPU_CACHE=0)";
  set_seed(3);
  nn::Sequential model{nn::Dense(32, nn::relu), nn::Dense(32, nn::relu), nn::Dense(4)};
  model.compile(optim::Adam({.learning_rate = 1e-3}),
                nn::SparseCategoricalCrossentropy({.from_logits = true}), {}, {.jit = true});
  Tensor x = f32(rand_tensor({16, 20}, 61, 0, 1));
  Tensor y = cast(f32(rand_tensor({16}, 62, 0, 3.99)), DType::i64);
  for (int i = 0; i < 3; ++i) model.train_on_batch(x, y);  // build, trace, plan, optimiser slots
  const auto before = detail::cpu_cache_stats();
  for (int i = 0; i < 5; ++i) model.train_on_batch(x, y);
  const auto after = detail::cpu_cache_stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);
}

TEST(GraphRandom, SavedGraphWithRandomNodesLoadsAndDrawsTheSame) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 4}, "x");
  Tensor y = x + random_normal_like(x, 0.0, 1.0, 99) + random_uniform_like(x);
  Graph h = Graph::deserialize(g.serialize());
  Session a(g), b(h);
  Tensor xv = zeros({3, 4});
  set_seed(4);
  Tensor ra = a.run(y, {{x, xv}});
  set_seed(4);
  Tensor rb = b.run(h.node("add_1").output(), {{h.node("x").output(), xv}});
  EXPECT_TRUE(same(ra, rb));
}
