// The perceptron and its limit. One threshold unit (a Dense(1) layer with a Heaviside step)
// trained with Rosenblatt's rule learns NAND; the same unit never gets XOR right, because no
// line separates XOR's two classes; a two-layer MLP trained by backpropagation learns XOR.
//
//   perceptron [--epochs N] [--mlp-epochs N] [--seed S] [--check]
//
// --check exits non-zero unless NAND is learned, XOR is never fully right and the MLP learns XOR.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;
using soma::Tensor;

namespace {

// Rosenblatt's rule, one sample at a time: w += lr (t - y) x, b += lr (t - y). There is no
// gradient here (the step has none): the rule moves the line only when a point is wrong.
// Returns how many of the four points are right after each epoch.
std::vector<int> train_perceptron(nn::Dense& unit, const Tensor& x, const std::vector<float>& t,
                                  int epochs, double lr = 0.1) {
  unit(x);  // builds kernel [2, 1] and bias [1]
  soma::Variable w = unit.kernel(), b = unit.bias();
  std::vector<int> correct;
  for (int e = 0; e < epochs; ++e) {
    for (std::int64_t i = 0; i < x.dim(0); ++i) {
      Tensor xi = x.slice(0, i, i + 1);  // [1, 2]
      double err = double(t[std::size_t(i)]) - unit(xi).item<double>();
      if (err != 0.0) {
        w.assign_add(xi.transpose() * (lr * err));
        b.assign_add(soma::scalar(lr * err));
      }
    }
    auto y = unit(x).to_vector<float>();
    int right = 0;
    for (std::size_t i = 0; i < y.size(); ++i) right += y[i] == t[i];
    correct.push_back(right);
  }
  return correct;
}

void print_table(const char* name, const Tensor& x, const std::vector<float>& t,
                 const std::vector<float>& y) {
  std::printf("  %-4s  x1 x2 | target  output\n", name);
  auto xv = x.to_vector<float>();
  for (std::size_t i = 0; i < t.size(); ++i)
    std::printf("        %2.0f %2.0f | %4.0f    %6.3f\n", xv[2 * i], xv[2 * i + 1], t[i], y[i]);
}

int max_of(const std::vector<int>& v) {
  int m = 0;
  for (int c : v) m = c > m ? c : m;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // The MLP of part 3 runs on the device; the perceptron rule of parts 1 and 2 reads single
  // weights and stays on the CPU.
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  int epochs = 20, mlp_epochs = 600;
  unsigned long seed = 1;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--mlp-epochs" && i + 1 < argc) mlp_epochs = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr, "usage: perceptron [--epochs N] [--mlp-epochs N] [--seed S] [--check]\n");
      return 2;
    }
  }
  soma::set_seed(seed);
  const Tensor x = soma::constant<float>({{0, 0}, {0, 1}, {1, 0}, {1, 1}});
  const std::vector<float> nand = {1, 1, 1, 0}, xor_ = {0, 1, 1, 0};

  // 1. NAND is linearly separable: the rule converges in a few epochs.
  nn::Dense nand_unit(1, nn::step);
  auto nand_correct = train_perceptron(nand_unit, x, nand, epochs);
  std::printf("perceptron on NAND: %d/4 right after %d epochs; w = [%.2f, %.2f], b = %.2f\n",
              nand_correct.back(), epochs, nand_unit.kernel().value().at<double>({0, 0}),
              nand_unit.kernel().value().at<double>({1, 0}),
              nand_unit.bias().value().at<double>({0}));
  print_table("NAND", x, nand, nand_unit(x).to_vector<float>());

  // 2. XOR is not: the same rule cycles for ever and never has all four points right.
  nn::Dense xor_unit(1, nn::step);
  auto xor_correct = train_perceptron(xor_unit, x, xor_, 5 * epochs);
  std::printf("perceptron on XOR:  at best %d/4 right in %d epochs (never 4: not separable)\n",
              max_of(xor_correct), 5 * epochs);
  print_table("XOR", x, xor_, xor_unit(x).to_vector<float>());

  // 3. A hidden layer bends the boundary: 2-4-1 with tanh and a sigmoid output, trained by
  // backpropagation (Adam on binary cross-entropy) through the Keras-style API.
  nn::Sequential mlp{nn::Input({2}), nn::Dense(4, nn::tanh), nn::Dense(1, nn::sigmoid)};
  mlp.to(device);
  mlp.compile(soma::optim::Adam({.learning_rate = 0.05}), nn::BinaryCrossentropy());
  mlp.fit(x, soma::constant<float>({{0}, {1}, {1}, {0}}),
          {.epochs = mlp_epochs, .batch_size = 4, .verbose = 0, .seed = seed});
  auto p = soma::examples::host(mlp.predict(x)).to_vector<float>();
  int mlp_right = 0;
  for (std::size_t i = 0; i < 4; ++i) mlp_right += (p[i] > 0.5f) == (xor_[i] > 0.5f);
  std::printf("2-layer MLP on XOR: %d/4 right after %d epochs\n", mlp_right, mlp_epochs);
  print_table("XOR", x, xor_, p);

  if (check) {
    bool ok = nand_correct.back() == 4 && max_of(xor_correct) < 4 && mlp_right == 4;
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
