// Graph mode: placeholders, sessions, feeds and fetches, errors naming nodes, name scopes,
// symbolic gradients, minimize (graph training equals eager training), passes, DOT, files,
// tracing.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

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

}  // namespace

// ---- define and run -------------------------------------------------------------------------
TEST(Graph, PlaceholderFeedsComputeWhatEagerComputes) {
  Graph g;
  Tensor x, y;
  Tensor w0 = rand_tensor({3, 2}, 1);
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f64, {-1, 3}, "x");
    Tensor w = g.variable(w0, "w");
    y = tanh(matmul(x, w)) * 2.0 + 1.0;
  }
  EXPECT_TRUE(is_symbolic(y));
  EXPECT_EQ(y.shape(), (Shape{-1, 2}));
  Session sess(g);
  for (std::int64_t batch : {4, 7}) {
    Tensor xv = rand_tensor({batch, 3}, 2 + std::uint64_t(batch));
    Tensor got = sess.run(y, {{x, xv}});
    EXPECT_TRUE(all_close(got, tanh(matmul(xv, w0)) * 2.0 + 1.0, 1e-12, 1e-12));
  }
  EXPECT_EQ(sess.stats().plans, 2);  // one plan per fed shape
}

TEST(Graph, OpsOnSymbolicTensorsBuildNodesWithoutAScope) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {2}, "x");
  Tensor y = exp(x) + x;  // no GraphScope: the symbolic input decides
  EXPECT_TRUE(g.owns(y));
  Tensor xv = constant<float>({0.5f, -1.0f});
  EXPECT_TRUE(all_close(Session(g).run(y, {{x, xv}}), exp(xv) + xv));
}

TEST(Graph, RunComputesOnlyWhatTheFetchesNeed) {
  Graph g;
  Tensor a, b, c;
  {
    GraphScope scope(g);
    a = g.placeholder(DType::f32, {2}, "a");
    b = g.placeholder(DType::f32, {2}, "b");
    c = a * 3.0;
  }
  // b is not needed for c, so it need not be fed.
  Tensor out = Session(g).run(c, {{a, constant<float>({1.f, 2.f})}});
  EXPECT_TRUE(all_close(out, std::vector<double>{3, 6}));
}

TEST(Graph, UnfedPlaceholderIsAnErrorNamingIt) {
  Graph g;
  Tensor y;
  {
    GraphScope scope(g);
    auto s = name_scope("inputs");
    Tensor x = g.placeholder(DType::f32, {-1, 4}, "images");
    y = sum(x);
  }
  std::string msg = what_of([&] { Session(g).run(y); });
  EXPECT_NE(msg.find("placeholder 'inputs/images'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[-1, 4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not fed"), std::string::npos) << msg;
}

TEST(Graph, IncompatibleFeedShapeIsAnErrorNamingThePlaceholder) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 4}, "x");
  Tensor y = relu(x);
  std::string msg = what_of([&] { Session(g).run(y, {{x, zeros({2, 5})}}); });
  EXPECT_NE(msg.find("placeholder 'x' has shape [-1, 4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dimension 1 is 5 vs 4"), std::string::npos) << msg;
  msg = what_of([&] { Session(g).run(y, {{x, zeros({2, 4}, DType::f64)}}); });
  EXPECT_NE(msg.find("expects f32, fed f64"), std::string::npos) << msg;
  msg = what_of([&] { Session(g).run(y, {{y, zeros({2, 4})}}); });
  EXPECT_NE(msg.find("only placeholders can be fed; 'relu' is a relu"), std::string::npos) << msg;
}

TEST(Graph, BuildTimeShapeErrorNamesTheNode) {
  Graph g;
  GraphScope scope(g);
  Tensor x = g.placeholder(DType::f32, {-1, 3}, "x");
  Tensor b = g.variable(zeros({4}), "b");
  auto s = name_scope("dense_1");
  std::string msg = what_of([&] { add(x, b); });
  EXPECT_NE(msg.find("graph node 'dense_1/add'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot broadcast [-1, 3] with [4]"), std::string::npos) << msg;
}

TEST(Graph, RunTimeShapeErrorNamesTheNode) {
  Graph g;
  Tensor x, z, y;
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f32, {-1, 3}, "x");
    z = g.placeholder(DType::f32, {-1, 3}, "z");
    auto s = name_scope("layer");
    y = x + z;
  }
  Session sess(g);
  EXPECT_EQ(sess.run(y, {{x, ones({5, 3})}, {z, ones({5, 3})}}).shape(), (Shape{5, 3}));
  std::string msg = what_of([&] { sess.run(y, {{x, ones({5, 3})}, {z, ones({4, 3})}}); });
  EXPECT_NE(msg.find("graph node 'layer/add'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot broadcast [5, 3] with [4, 3]"), std::string::npos) << msg;
}

TEST(Graph, NameScopesPrefixNodesAndVariables) {
  Graph g;
  GraphScope scope(g);
  Tensor x = g.placeholder(DType::f32, {-1, 3}, "x");
  {
    auto s1 = name_scope("block");
    auto s2 = name_scope("dense_1");
    Tensor w = g.variable(zeros({3, 2}), "kernel");
    Tensor h = matmul(x, w);
    Tensor h2 = matmul(x, w);
    (void)h2;
    EXPECT_EQ(g.node_of(h).name, "block/dense_1/matmul");
    EXPECT_EQ(g.node_of(w).name, "block/dense_1/kernel");
  }
  EXPECT_EQ(g.node("block/dense_1/matmul").op_name(), "matmul");
  EXPECT_EQ(g.node("block/dense_1/matmul_1").kind, NodeKind::Op);
  EXPECT_EQ(g.node("block/dense_1/kernel").kind, NodeKind::Variable);
  EXPECT_EQ(g.node("block/dense_1/matmul").output().shape(), (Shape{-1, 2}));
  std::string msg = what_of([&] { g.node("dense_1/matmul"); });
  EXPECT_NE(msg.find("no node named 'dense_1/matmul'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("block/dense_1/matmul"), std::string::npos) << msg;  // suggestion
  EXPECT_NE(what_of([] { name_scope("a/b"); }).find("no '/'"), std::string::npos);
}

TEST(Graph, TensorsOfAnotherGraphAreRejected) {
  Graph g1, g2;
  Tensor a = g1.placeholder(DType::f32, {2}, "a");
  GraphScope scope(g2);
  std::string msg = what_of([&] { exp(a); });
  EXPECT_NE(msg.find("another graph"), std::string::npos) << msg;
}

TEST(Graph, FetchingAVariableGivesItsValueBeforeTheUpdate) {
  Graph g;
  Tensor w, loss, train;
  {
    GraphScope scope(g);
    w = g.variable(constant<float>({1.f, 2.f}), "w");
    loss = sum(square(w));
    train = minimize(optim::SGD({.learning_rate = 0.25}), loss);
  }
  Session sess(g);
  auto out = sess.run({w, loss, train});
  EXPECT_TRUE(all_close(out[0], std::vector<double>{1, 2}));
  EXPECT_NEAR(out[1].item<double>(), 5.0, 1e-6);
  EXPECT_EQ(out[2].item<std::int64_t>(), 1);  // the optimiser's step count
  // w -= 0.25 * 2w
  EXPECT_TRUE(all_close(sess.run(w), std::vector<double>{0.5, 1.0}));
}

TEST(Graph, MinimizeUpdatesOnlyTheGivenVariables) {
  Graph g;
  Tensor w, b, loss, train;
  {
    GraphScope scope(g);
    w = g.variable(constant<float>({1.f}), "w");
    b = g.variable(constant<float>({1.f}), "b");
    loss = sum(square(w + b));
    train = minimize(optim::SGD({.learning_rate = 0.25}), loss, std::vector<Tensor>{w});
  }
  EXPECT_EQ(g.trainable_variables().size(), 2u);
  Session sess(g);
  sess.run(train);
  EXPECT_NEAR(sess.run(w).item<double>(), 0.0, 1e-6);  // 1 - 0.25 * 2 * (1 + 1)
  EXPECT_NEAR(sess.run(b).item<double>(), 1.0, 1e-6);
  std::string msg = what_of([&] { minimize(optim::SGD(), loss, std::vector<Tensor>{loss}); });
  EXPECT_NE(msg.find("not a variable"), std::string::npos) << msg;
}

TEST(Graph, ApplyGradientsTakesGradientsBuiltByHand) {
  Graph g;
  Tensor w, step;
  {
    GraphScope scope(g);
    w = g.variable(constant<float>({2.f, -2.f}), "w");
    Tensor grad = clip(gradients(sum(square(w) * 10.0), w), -1.0, 1.0);  // clipped by hand
    step = apply_gradients(optim::SGD({.learning_rate = 0.5}), {grad}, {w});
  }
  Session sess(g);
  EXPECT_EQ(sess.run(step).item<std::int64_t>(), 1);
  EXPECT_EQ(sess.run(step).item<std::int64_t>(), 2);
  EXPECT_TRUE(all_close(sess.run(w), std::vector<double>{1, -1}));
}

// ---- gradients ------------------------------------------------------------------------------
TEST(GraphGradients, EqualTheTapesGradients) {
  Tensor x0 = rand_tensor({4, 3}, 11), w0 = rand_tensor({3, 2}, 12);
  GradientTape tape(true);
  Variable wv(w0, "w");
  Tensor xe = x0;
  tape.watch(xe);
  Tensor le = mean(square(tanh(matmul(xe, wv)) - 0.5)) + sum(exp(xe) * 0.1);
  Tensor gx = tape.gradient(le, xe), gw = tape.gradient(le, wv);

  Graph g;
  Tensor x, l;
  std::vector<Tensor> grads;
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f64, {-1, 3}, "x");
    Tensor w = g.variable(wv);
    l = mean(square(tanh(matmul(x, w)) - 0.5)) + sum(exp(x) * 0.1);
    grads = gradients({l}, {x, w});
  }
  auto out = Session(g).run({l, grads[0], grads[1]}, {{x, x0}});
  EXPECT_TRUE(all_close(out[0], le, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out[1], gx, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out[2], gw, 1e-12, 1e-12));
}

TEST(GraphGradients, UnconnectedSourceGetsZeros) {
  Graph g;
  GraphScope scope(g);
  Tensor x = g.placeholder(DType::f32, {3}, "x");
  Tensor z = g.placeholder(DType::f32, {2}, "z");
  Tensor gz = gradients(sum(x), z);
  EXPECT_TRUE(all_close(Session(g).run(gz, {{x, ones({3})}, {z, ones({2})}}),
                        std::vector<double>{0, 0}));
}

// ---- training in graph mode equals eager training --------------------------------------------
TEST(GraphTraining, LinearRegressionMatchesEager) {
  set_seed(3);
  Tensor xs = random_uniform({64, 1}, -1, 1);
  Tensor ys = xs * 3.0 + 2.0 + random_normal({64, 1}, 0, 0.05);
  // Eager.
  Variable we(zeros({1, 1}), "w"), be(zeros({1}), "b");
  optim::SGD eager_opt({.learning_rate = 0.3});
  std::vector<double> eager_losses;
  for (int step = 0; step < 20; ++step) {
    GradientTape tape;
    Tensor loss = mean(square(matmul(xs, we) + be - ys));
    eager_opt.apply_gradients(tape.gradient(loss, std::vector<Variable>{we, be}), {we, be});
    eager_losses.push_back(loss.item<double>());
  }
  // Graph.
  Graph g;
  Tensor x, y, w, b, loss, train;
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f32, {-1, 1}, "x");
    y = g.placeholder(DType::f32, {-1, 1}, "y");
    w = g.variable(zeros({1, 1}), "w");
    b = g.variable(zeros({1}), "b");
    loss = mean(square(matmul(x, w) + b - y));
    train = minimize(optim::SGD({.learning_rate = 0.3}), loss);
  }
  Session sess(g);
  for (int step = 0; step < 20; ++step) {
    auto out = sess.run({loss, train}, {{x, xs}, {y, ys}});
    EXPECT_NEAR(out[0].item<double>(), eager_losses[std::size_t(step)], 1e-5) << "step " << step;
  }
  EXPECT_NEAR(sess.run(w).item<double>(), we.value().item<double>(), 1e-5);
  EXPECT_NEAR(sess.run(b).item<double>(), be.value().item<double>(), 1e-5);
  EXPECT_GT(sess.stats().folded_nodes, 0);  // the mean's gradient scale is a folded constant
}

namespace {
// Trains `eager` eagerly and `graphm` (same weights) through a graph; compares the losses.
void expect_same_training(nn::Module& eager, nn::Module& graphm, const Tensor& xs, const Tensor& ys,
                          const Shape& x_shape, nn::LossRef loss_fn, int steps) {
  optim::Adam eopt({.learning_rate = 0.01});
  auto gopt = std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01});
  std::vector<double> eager_losses;
  for (int s = 0; s < steps; ++s) {
    GradientTape tape;
    Tensor l = (*loss_fn)(ys, eager(xs));
    auto vars = eager.trainable_parameters();
    eopt.apply_gradients(tape.gradient(l, vars), vars);
    eager_losses.push_back(l.item<double>());
  }
  Graph g;
  Tensor x, y, l, train;
  {
    GraphScope scope(g);
    x = g.placeholder(xs.dtype(), x_shape, "x");
    y = g.placeholder(ys.dtype(), ys.shape(), "y");
    l = (*loss_fn)(y, graphm(x));
    train = minimize(optim::OptimizerRef(gopt), l, graphm.trainable_parameters());
  }
  Session sess(g);
  for (int s = 0; s < steps; ++s) {
    auto out = sess.run({l, train}, {{x, xs}, {y, ys}});
    EXPECT_NEAR(out[0].item<double>(), eager_losses[std::size_t(s)], 1e-5) << "step " << s;
  }
  EXPECT_EQ(sess.stats().plans, 1);
  EXPECT_EQ(sess.stats().last_run_allocations, 0);  // buffers are reused after the first run
}
}  // namespace

TEST(GraphTraining, MlpMatchesEager) {
  set_seed(5);
  Tensor xs = f32(rand_tensor({16, 6}, 21));
  Tensor ys = one_hot(argmax(rand_tensor({16, 3}, 22), 1), 3);
  nn::Sequential a{nn::Dense(8, nn::relu), nn::Dense(8, nn::relu), nn::Dense(3)};
  nn::Sequential b{nn::Dense(8, nn::relu), nn::Dense(8, nn::relu), nn::Dense(3)};
  a(xs);
  b(xs);  // build both, then give b a's weights
  b.load_state_dict(a.state_dict());
  // The losses divide by the batch size read from the shape, so the batch is fixed here.
  expect_same_training(a, b, xs, ys, {16, 6},
                       nn::CategoricalCrossentropy({.from_logits = true}), 6);
}

TEST(GraphTraining, CnnMatchesEager) {
  set_seed(6);
  Tensor xs = f32(rand_tensor({4, 1, 8, 8}, 31));
  Tensor ys = one_hot(argmax(rand_tensor({4, 3}, 32), 1), 3);
  auto make = [] {
    return nn::Sequential{nn::Conv2D(4, 3, {.activation = nn::relu}), nn::MaxPool2D(2),
                          nn::Flatten(), nn::Dense(3)};
  };
  nn::Sequential a = make(), b = make();
  a(xs);
  b(xs);
  b.load_state_dict(a.state_dict());
  // Flatten computes its target shape from the batch size, so the batch is fixed here.
  expect_same_training(a, b, xs, ys, {4, 1, 8, 8},
                       nn::CategoricalCrossentropy({.from_logits = true}), 4);
}

// ---- passes, memory, placement ---------------------------------------------------------------
TEST(GraphPasses, CommonSubexpressionsAreComputedOnce) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {3}, "x");
  Tensor y = exp(x) * 2.0 + exp(x) * 2.0;
  Session sess(g);
  Tensor xv = constant<float>({0.f, 1.f, 2.f});
  EXPECT_TRUE(all_close(sess.run(y, {{x, xv}}), exp(xv) * 4.0, 1e-5, 1e-6));
  EXPECT_GE(sess.stats().cse_nodes, 2);  // the second exp and the second multiply
}

TEST(GraphPasses, ElementwiseChainIsFusedAndEqualsEager) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1}, "x");
  Tensor y = x;
  {
    GraphScope scope(g);
    y = relu(sigmoid(tanh(exp(negative(abs(x * 0.5) + 1.0)) - 0.25)) * x);
  }
  Tensor xv = f32(rand_tensor({100000}, 41, -3, 3));
  Tensor expect = relu(sigmoid(tanh(exp(negative(abs(xv * 0.5) + 1.0)) - 0.25)) * xv);
  Session sess(g);
  Tensor got = sess.run(y, {{x, xv}});
  EXPECT_TRUE(all_close(got, expect, 0, 0));  // the same kernels: bit-identical
  EXPECT_EQ(sess.stats().fused_nodes, 10);
  EXPECT_NE(sess.plan_dot().find("cluster_fused"), std::string::npos);
  Session plain(g, {.optimize = false});
  EXPECT_TRUE(all_close(plain.run(y, {{x, xv}}), expect, 0, 0));
  EXPECT_EQ(plain.stats().fused_nodes, 0);
}

TEST(GraphPasses, SecondRunAllocatesNoBuffers) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 16}, "x");
  Tensor w = g.variable(f32(rand_tensor({16, 16}, 51)), "w");
  Tensor y = sum(relu(matmul(relu(matmul(x, w)), w)), {1});
  Session sess(g);
  Tensor xv = f32(rand_tensor({8, 16}, 52));
  Tensor first = sess.run(y, {{x, xv}});
  EXPECT_GT(sess.stats().last_run_allocations, 0);
  first = Tensor();  // the caller lets go of the last result
  Tensor second = sess.run(y, {{x, xv}});
  EXPECT_EQ(sess.stats().last_run_allocations, 0);
  // Buffers a caller still holds are never reused.
  Tensor third = sess.run(y, {{x, xv}});
  EXPECT_TRUE(all_close(second, third, 0, 0));
  EXPECT_NE(second.storage(), third.storage());
}

TEST(GraphSession, SoftPlacementRunsOnTheCpuAndSaysSoOnce) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {2}, "x");
  Tensor y = exp(x) + sqrt(x);
  Session sess(g, {.device = Device::cuda(0)});
  ::testing::internal::CaptureStderr();
  Tensor out = sess.run(y, {{x, constant<float>({1.f, 4.f})}});
  sess.run(y, {{x, constant<float>({1.f, 4.f})}});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(all_close(out, exp(constant<float>({1.f, 4.f})) + constant<float>({1.f, 2.f}), 1e-5));
  EXPECT_NE(err.find("soft placement"), std::string::npos) << err;
  EXPECT_EQ(err.find("soft placement"), err.rfind("soft placement")) << err;  // once
  Session strict(g, {.device = Device::cuda(0), .soft_placement = false});
  std::string msg = what_of([&] { strict.run(y, {{x, constant<float>({1.f, 4.f})}}); });
  EXPECT_NE(msg.find("no kernel on cuda:0"), std::string::npos) << msg;
}

TEST(GraphSession, InterOpThreadsRunIndependentBranchesToTheSameResult) {
  Graph g;
  Tensor x = g.placeholder(DType::f64, {-1, 8}, "x");
  std::vector<Tensor> branches;
  {
    GraphScope scope(g);
    for (int i = 0; i < 6; ++i) {
      Tensor w = g.variable(rand_tensor({8, 8}, 100 + std::uint64_t(i)), "w" + std::to_string(i));
      branches.push_back(sum(tanh(matmul(relu(matmul(x, w)), w)), {1}));
    }
  }
  Tensor y = branches[0];
  for (int i = 1; i < 6; ++i) y = y + branches[std::size_t(i)] * double(i);
  Tensor xv = rand_tensor({16, 8}, 99);
  Tensor expect = Session(g).run(y, {{x, xv}});
  Session par(g, {.inter_op_threads = 3});
  // With branches running concurrently, how many buffers are in use at once depends on the
  // schedule: the pool keeps every buffer, so a run allocates only when it reaches a new peak
  // (seen under TSan's slow-down: one buffer in run 20). Without reuse every run would allocate
  // one buffer per node.
  std::int64_t first = 0, late = 0;
  std::string per_run;
  for (int r = 0; r < 20; ++r) {
    Tensor got = par.run({y, branches[2]}, {{x, xv}})[0];
    ASSERT_TRUE(all_close(got, expect, 0, 0)) << "run " << r;
    const auto a = std::int64_t(par.stats().last_run_allocations);
    per_run += std::to_string(a) + " ";
    if (r == 0) first = a;
    if (r >= 10) late += a;
  }
  EXPECT_GT(first, 10) << per_run;
  EXPECT_LE(late, 3) << "allocations per run: " << per_run;
}

TEST(GraphSession, InterOpThreadsTrainLikeEager) {
  set_seed(3);
  Tensor xs = random_uniform({32, 1}, -1, 1);
  Tensor ys = xs * 3.0 + 2.0;
  auto run = [&](int threads) {
    Graph g;
    Tensor x, y, loss, train;
    {
      GraphScope scope(g);
      x = g.placeholder(DType::f32, {-1, 1}, "x");
      y = g.placeholder(DType::f32, {-1, 1}, "y");
      Tensor w = g.variable(zeros({1, 1}), "w"), b = g.variable(zeros({1}), "b");
      loss = mean(square(matmul(x, w) + b - y));
      train = minimize(optim::Adam({.learning_rate = 0.1}), loss);
    }
    Session sess(g, {.inter_op_threads = threads});
    std::vector<double> losses;
    for (int i = 0; i < 10; ++i) losses.push_back(sess.run({loss, train}, {{x, xs}, {y, ys}})[0].item<double>());
    return losses;
  };
  EXPECT_EQ(run(1), run(2));
}

TEST(GraphSession, ThreadCountsAreValidated) {
  Graph g;
  EXPECT_NE(what_of([&] { Session(g, {.inter_op_threads = 0}); }).find("thread counts"),
            std::string::npos);
  Tensor x = g.placeholder(DType::f32, {2}, "x");
  Session s(g, {.intra_op_threads = 1});
  EXPECT_TRUE(all_close(s.run(x * 2.0, {{x, ones({2})}}), std::vector<double>{2, 2}));
}

// ---- DOT and files --------------------------------------------------------------------------
TEST(GraphFiles, DotShowsOpsShapesAndFusedGroups) {
  Graph g;
  GraphScope scope(g);
  Tensor x = g.placeholder(DType::f32, {-1, 4}, "x");
  auto s = name_scope("act");
  Tensor y = tanh(exp(x) + 1.0);
  std::string dot = g.to_dot();
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("act/exp"), std::string::npos) << dot;
  EXPECT_NE(dot.find("[-1, 4] f32"), std::string::npos) << dot;
  EXPECT_NE(dot.find("cluster_fused"), std::string::npos) << dot;
  (void)y;
}

TEST(GraphFiles, SavedGraphLoadsAndRunsIdentically) {
  Graph g;
  Tensor x, y, gw;
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f64, {-1, 3}, "x");
    auto s = name_scope("dense");
    Tensor w = g.variable(rand_tensor({3, 2}, 61), "kernel");
    y = softmax(matmul(x, w) + g.constant(constant<double>({0.5, -0.5}), "bias"), -1);
    gw = gradients(sum(square(y)), w);
  }
  std::string path = ::testing::TempDir() + "/soma_graph_test.graph";
  g.save(path);
  Graph h = Graph::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(h.size(), g.size());
  Tensor xv = rand_tensor({5, 3}, 62);
  auto a = Session(g).run({y, gw}, {{x, xv}});
  Tensor hx = h.node("x").output(), hg = h.node(g.node_of(gw).name).output();
  auto b = Session(h).run({h.node(g.node_of(y).name).output(), hg}, {{hx, xv}});
  EXPECT_TRUE(all_close(b[0], a[0], 0, 0));
  EXPECT_TRUE(all_close(b[1], a[1], 0, 0));
  EXPECT_EQ(h.node("dense/kernel").kind, NodeKind::Variable);
}

TEST(GraphFiles, BadFilesAreClearErrors) {
  EXPECT_NE(what_of([] { Graph::deserialize("hello\n"); }).find("not a soma graph file"),
            std::string::npos);
  EXPECT_NE(what_of([] { Graph::deserialize("soma-graph 1\nnode 0\nkind op\nop nosuchop\nend\n"); })
                .find("no op named 'nosuchop'"),
            std::string::npos);
  EXPECT_NE(what_of([] { Graph::deserialize("soma-graph 1\nnode 0\nkind placeholder\n"); })
                .find("truncated"),
            std::string::npos);
  Graph g;
  Tensor w = g.variable(ones({2}), "w");
  minimize(optim::SGD(), sum(w * w));
  EXPECT_NE(what_of([&] { g.serialize(); }).find("optimiser"), std::string::npos);
}

// ---- tracing --------------------------------------------------------------------------------
TEST(Function, TracesOncePerSignatureAndMatchesEager) {
  Variable w(rand_tensor({3, 2}, 71), "w");
  int calls = 0;
  auto fn = [&](const std::vector<Tensor>& in) {
    ++calls;
    return std::vector<Tensor>{sigmoid(matmul(in[0], w)) * 3.0};
  };
  Function f = function(fn);
  Tensor x1 = rand_tensor({4, 3}, 72), x2 = rand_tensor({4, 3}, 73), x3 = rand_tensor({6, 3}, 74);
  EXPECT_TRUE(all_close(f({x1})[0], fn({x1})[0], 0, 0));
  EXPECT_TRUE(all_close(f({x2})[0], fn({x2})[0], 0, 0));
  EXPECT_EQ(f.num_traces(), 1u);
  EXPECT_TRUE(all_close(f({x3})[0], fn({x3})[0], 0, 0));
  EXPECT_EQ(f.num_traces(), 2u);
  EXPECT_EQ(calls, 2 + 3);  // two traces plus the three eager reference calls
  // Variables are read live.
  w.assign(zeros({3, 2}));
  EXPECT_TRUE(all_close(f({x1})[0], full_like(f({x1})[0], 1.5), 0, 0));
}

TEST(Function, TracesATapeAndReturnsGradients) {
  Variable w(rand_tensor({3, 1}, 81), "w");
  Function step = function([&](const std::vector<Tensor>& in) {
    GradientTape tape;
    Tensor loss = mean(square(matmul(in[0], w) - in[1]));
    return std::vector<Tensor>{loss, tape.gradient(loss, w)};
  });
  Tensor x = rand_tensor({8, 3}, 82), y = rand_tensor({8, 1}, 83);
  GradientTape tape;
  Tensor loss = mean(square(matmul(x, w) - y));
  Tensor gw = tape.gradient(loss, w);
  for (int i = 0; i < 2; ++i) {
    auto out = step({x, y});
    EXPECT_TRUE(all_close(out[0], loss, 1e-12, 1e-12));
    EXPECT_TRUE(all_close(out[1], gw, 1e-12, 1e-12));
  }
  EXPECT_EQ(step.num_traces(), 1u);
}

TEST(Function, SingleTensorFormAndConstantOutputs) {
  Function f = function([](const Tensor& x) { return exp(x) - 1.0; });
  Tensor x = constant<float>({0.f, 1.f});
  EXPECT_TRUE(all_close(f(x), exp(x) - 1.0));
  Function c = function([](const std::vector<Tensor>&) { return ones({2}); });
  EXPECT_TRUE(all_close(c(std::vector<Tensor>{x})[0], std::vector<double>{1, 1}));
}

// ---- compile(..., {.jit = true}) ---------------------------------------------------------------
TEST(Jit, FitThroughATracedStepMatchesEager) {
  Tensor xs = f32(rand_tensor({64, 5}, 91));
  Tensor ys = cast(argmax(rand_tensor({64, 3}, 92), 1), DType::i64);
  auto train = [&](bool jit) {
    set_seed(9);
    nn::Sequential m{nn::Dense(16, nn::relu), nn::Dense(3)};
    m.compile(optim::Adam({.learning_rate = 0.01}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()},
              {.jit = jit});
    auto h = m.fit(xs, ys, {.epochs = 3, .batch_size = 16, .verbose = 0, .seed = 1});
    return std::make_pair(h, m.predict(xs));
  };
  auto [he, pe] = train(false);
  auto [hj, pj] = train(true);
  const auto& le = he.history.at("loss");
  const auto& lj = hj.history.at("loss");
  ASSERT_EQ(le.size(), lj.size());
  for (std::size_t i = 0; i < le.size(); ++i) EXPECT_NEAR(lj[i], le[i], 1e-5) << "epoch " << i;
  EXPECT_NEAR(hj.history.at("accuracy").back(), he.history.at("accuracy").back(), 1e-6);
  EXPECT_TRUE(all_close(pj, pe, 1e-5, 1e-5));
}

// A symbolic tensor has no values until a session runs the graph: reading it is a clear error,
// not a read through a null pointer.
TEST(Graph, ReadingASymbolicTensorIsAClearError) {
  Graph g;
  Tensor x = g.placeholder(DType::f32, {2}, "x");
  Tensor y = x * 2.0;
  for (const Tensor& t : {x, y}) {
    try {
      (void)t.to_vector<float>();
      FAIL() << "expected soma::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("symbolic graph tensor"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)t.data<float>(), Error);
    EXPECT_THROW((void)t.at<float>({0}), Error);
  }
}

// Flatten computes its target from the non-batch dimensions, so a define-and-run graph with an
// unknown batch runs at any fed batch size.
TEST(Graph, FlattenAndDenseWorkWithAnUnknownBatch) {
  set_seed(3);
  nn::Flatten flat;
  nn::Dense dense(4);
  Graph g;
  Tensor x = g.placeholder(DType::f32, {-1, 3, 2}, "x");
  Tensor y = dense(flat(x));
  Session sess(g);
  for (std::int64_t batch : {1, 5}) {
    Tensor xv = rand_tensor({batch, 3, 2}, 7).cast(DType::f32);
    Tensor want = dense(flat(xv));
    EXPECT_TRUE(all_close(sess.run(y, {{x, xv}}), want)) << "batch " << batch;
  }
}
