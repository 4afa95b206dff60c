// Linear regression in graph mode: placeholders for the data, graph variables for w and b, a
// minimize() update node, and a Session that runs the graph once per step with new feeds.
//   graph_mode [--samples N] [--steps N] [--batch N] [--check] [--dot FILE]
// --check exits with status 1 unless w and b come within 0.05 of the true 3 and 2.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <soma/soma.hpp>

int main(int argc, char** argv) {
  std::int64_t samples = 1024, steps = 200, batch = 64;
  bool check = false;
  const char* dot = nullptr;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--samples")) samples = std::atoll(next());
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(next());
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(next());
    else if (!std::strcmp(argv[i], "--check")) check = true;
    else if (!std::strcmp(argv[i], "--dot")) dot = next();
    else {
      std::fprintf(stderr, "usage: graph_mode [--samples N] [--steps N] [--batch N] [--check] [--dot FILE]\n");
      return 2;
    }
  }
  if (samples < 1 || steps < 1 || batch < 1 || batch > samples) {
    std::fprintf(stderr, "need 1 <= batch <= samples and steps >= 1\n");
    return 2;
  }

  soma::set_seed(7);
  // Noisy samples of y = 3x + 2.
  soma::Tensor xs = soma::random_uniform({samples, 1}, -1.0, 1.0);
  soma::Tensor ys = xs * 3.0 + 2.0 + soma::random_normal({samples, 1}, 0.0, 0.05);

  // Define: nothing runs here, the ops become nodes of g.
  soma::Graph g;
  soma::Tensor x, y, w, b, loss, train;
  {
    soma::GraphScope scope(g);
    x = g.placeholder(soma::DType::f32, {-1, 1}, "x");  // the batch size is left open
    y = g.placeholder(soma::DType::f32, {-1, 1}, "y");
    auto s = soma::name_scope("linear");
    w = g.variable(soma::zeros({1, 1}), "w");
    b = g.variable(soma::zeros({1}), "b");
    soma::Tensor pred = soma::matmul(x, w) + b;
    loss = soma::mean(soma::square(pred - y));
    train = soma::minimize(soma::optim::SGD({.learning_rate = 0.5}), loss);
  }
  if (dot) std::ofstream(dot) << g.to_dot();

  // Run: each step feeds one batch and fetches the loss and the update.
  soma::Session sess(g);
  const std::int64_t nbatches = samples / batch;
  for (std::int64_t step = 0; step < steps; ++step) {
    std::int64_t k = step % nbatches;
    soma::Tensor xb = xs.slice(0, k * batch, (k + 1) * batch);
    soma::Tensor yb = ys.slice(0, k * batch, (k + 1) * batch);
    auto out = sess.run({loss, train}, {{x, xb}, {y, yb}});
    if (step % (steps / 5 > 0 ? steps / 5 : 1) == 0 || step + 1 == steps)
      std::printf("step %4lld  loss %.6f\n", (long long)step, out[0].item<double>());
  }
  double wv = sess.run(w).item<double>(), bv = sess.run(b).item<double>();
  std::printf("learned w = %.4f, b = %.4f (true: 3, 2)\n", wv, bv);
  std::printf("graph: %zu nodes; session: %lld plan(s), %lld buffers allocated in the last run\n",
              g.size(), (long long)sess.stats().plans, (long long)sess.stats().last_run_allocations);
  if (check && (std::abs(wv - 3.0) > 0.05 || std::abs(bv - 2.0) > 0.05)) {
    std::fprintf(stderr, "check failed: w, b too far from 3, 2\n");
    return 1;
  }
  return 0;
}
