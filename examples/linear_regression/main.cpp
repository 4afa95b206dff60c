// Fits y = w x + b by gradient descent with a GradientTape and prints what it learned.
#include <cstdio>
#include <soma/soma.hpp>

int main() {
  soma::set_seed(7);
  // Noisy samples of y = 3x + 2.
  soma::Tensor x = soma::random_uniform({256, 1}, -1.0, 1.0);
  soma::Tensor y = x * 3.0 + 2.0 + soma::random_normal({256, 1}, 0.0, 0.05);

  soma::Variable w(soma::zeros({1}), "w");
  soma::Variable b(soma::zeros({1}), "b");
  const double lr = 0.5;
  for (int step = 0; step <= 100; ++step) {
    soma::GradientTape tape;
    soma::Tensor pred = x * w + b;
    soma::Tensor loss = soma::mean(soma::square(pred - y));
    auto grads = tape.gradient(loss, std::vector<soma::Variable>{w, b});
    w.assign_sub(grads[0] * lr);
    b.assign_sub(grads[1] * lr);
    if (step % 20 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item<double>());
  }
  std::printf("learned w = %.4f, b = %.4f (true: 3, 2)\n", w.value().item<double>(),
              b.value().item<double>());
  return 0;
}
