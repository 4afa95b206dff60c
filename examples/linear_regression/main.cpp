// Fits y = w x + b by gradient descent with a GradientTape and prints what it learned.
//
//   linear_regression [--steps N] [--samples N] [--check] [--device cuda]
//
// --check exits non-zero unless w and b come within 0.05 of the true 3 and 2.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <soma/soma.hpp>

#include "example_device.hpp"

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  int steps = 100;
  long samples = 256;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::atol(argv[++i]);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr, "usage: linear_regression [--steps N] [--samples N] [--check]\n");
      return 2;
    }
  }
  soma::set_seed(7);
  // Noisy samples of y = 3x + 2.
  soma::Tensor x = soma::random_uniform({samples, 1}, -1.0, 1.0);
  soma::Tensor y = x * 3.0 + 2.0 + soma::random_normal({samples, 1}, 0.0, 0.05);
  x = x.to(device);  // the data and the weights where the steps run
  y = y.to(device);

  soma::Variable w(soma::zeros({1}).to(device), "w");
  soma::Variable b(soma::zeros({1}).to(device), "b");
  const double lr = 0.5;
  for (int step = 0; step <= steps; ++step) {
    soma::GradientTape tape;  // records the ops below; trainable variables are watched
    soma::Tensor pred = x * w + b;
    soma::Tensor loss = soma::mean(soma::square(pred - y));
    auto grads = tape.gradient(loss, {w, b});
    w -= lr * grads[0];  // in place, not recorded (as assign_sub)
    b -= lr * grads[1];
    if (step % 20 == 0) std::printf("step %3d  loss %.6f\n", step, soma::examples::host(loss).item<double>());
  }
  const double wv = soma::examples::host(w.value()).item<double>(),
               bv = soma::examples::host(b.value()).item<double>();
  std::printf("learned w = %.4f, b = %.4f (true: 3, 2)\n", wv, bv);
  if (check) {
    const bool ok = std::abs(wv - 3.0) < 0.05 && std::abs(bv - 2.0) < 0.05;
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
