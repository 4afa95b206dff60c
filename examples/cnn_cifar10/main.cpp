// A small convolutional network on CIFAR-10 (32x32 colour images, 10 classes): two 3x3
// convolution + max-pooling stages find local patterns, a dense head classifies them.
//
//   cnn_cifar10 [--data DIR] [--epochs N] [--train-samples N] [--test-samples N]
//               [--synthetic N] [--write-cifar DIR] [--min-accuracy A] [--seed S]
//               [--device cuda]   (or SOMA_DEVICE=cuda; example_device.hpp)
//
// --data DIR: the CIFAR-10 binary version (data_batch_1.bin .. data_batch_5.bin, test_batch.bin,
// directly in DIR or in DIR/cifar-10-batches-bin). Without it the program says how to get the
// data and trains on a small synthetic set of the same shape instead (N images, default 1000):
// stripes whose orientation and spacing give the class, in random colours, phases and noise.
// --write-cifar DIR writes that synthetic set as CIFAR-10 binary files and exits (so the reader
// can be tried without the real data). --min-accuracy exits non-zero below that test accuracy.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;
using soma::Tensor;

namespace {

constexpr int kSide = 32, kPixels = 3 * kSide * kSide;

// One synthetic image per label: class c has stripes that run horizontally (c < 5) or
// vertically, with a period of 2 + c % 5 pixels. Colour, phase and noise are random, so only
// the pattern tells the classes apart, and a convolution sees it anywhere in the image.
struct Images {
  std::vector<std::uint8_t> x, y;  // [n, 3, 32, 32] and [n], as CIFAR stores them
};
Images synthetic(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.08f);
  Images d{std::vector<std::uint8_t>(std::size_t(n) * kPixels), std::vector<std::uint8_t>(std::size_t(n))};
  for (int i = 0; i < n; ++i) {
    const int c = i % 10, period = 2 + c % 5;
    const bool vertical = c >= 5;
    const int phase = int(u(rng) * float(period));
    float fg[3], bg[3];
    for (int ch = 0; ch < 3; ++ch) {
      fg[ch] = 0.5f + 0.5f * u(rng);
      bg[ch] = 0.4f * u(rng);
    }
    d.y[std::size_t(i)] = std::uint8_t(c);
    for (int ch = 0; ch < 3; ++ch)
      for (int r = 0; r < kSide; ++r)
        for (int col = 0; col < kSide; ++col) {
          const int pos = (vertical ? col : r) + phase;
          const bool on = pos % period < (period + 1) / 2;
          float v = (on ? fg[ch] : bg[ch]) + noise(rng);
          v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
          d.x[std::size_t(i) * kPixels + std::size_t((ch * kSide + r) * kSide + col)] =
              std::uint8_t(v * 255.0f + 0.5f);
        }
  }
  return d;
}

// The CIFAR-10 binary layout: per image one label byte, then the red, green and blue planes.
void write_batch(const std::string& path, const Images& d, int from, int to) {
  std::ofstream f(path, std::ios::binary);
  for (int i = from; i < to; ++i) {
    f.put(char(d.y[std::size_t(i)]));
    f.write(reinterpret_cast<const char*>(d.x.data() + std::size_t(i) * kPixels), kPixels);
  }
  if (!f) throw std::runtime_error("cannot write " + path);
}

// Five training batches and one test batch, as the real archive has them.
void write_cifar(const std::string& dir, int n_train, int n_test, unsigned seed) {
  std::filesystem::create_directories(dir);
  const Images train = synthetic(n_train, seed), test = synthetic(n_test, seed + 1);
  for (int b = 0; b < 5; ++b)
    write_batch(dir + "/data_batch_" + std::to_string(b + 1) + ".bin", train, n_train * b / 5,
                n_train * (b + 1) / 5);
  write_batch(dir + "/test_batch.bin", test, 0, n_test);
}

Tensor head(const Tensor& t, long n) { return n > 0 && n < t.dim(0) ? t.slice(0, 0, n) : t; }

}  // namespace

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  std::string dir, write_dir;
  int epochs = 10, synthetic_n = 1000;
  long train_samples = 0, test_samples = 0;
  double min_accuracy = -1.0;
  unsigned seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) dir = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--train-samples" && i + 1 < argc) train_samples = std::atol(argv[++i]);
    else if (a == "--test-samples" && i + 1 < argc) test_samples = std::atol(argv[++i]);
    else if (a == "--synthetic" && i + 1 < argc) synthetic_n = std::atoi(argv[++i]);
    else if (a == "--write-cifar" && i + 1 < argc) write_dir = argv[++i];
    else if (a == "--min-accuracy" && i + 1 < argc) min_accuracy = std::atof(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = unsigned(std::strtoul(argv[++i], nullptr, 10));
    else {
      std::fprintf(stderr,
                   "usage: cnn_cifar10 [--data DIR] [--epochs N] [--train-samples N] "
                   "[--test-samples N] [--synthetic N] [--write-cifar DIR] [--min-accuracy A] "
                   "[--seed S]\n");
      return 2;
    }
  }
  if (synthetic_n < 10) {
    std::fprintf(stderr, "cnn_cifar10: --synthetic needs at least 10 images\n");
    return 2;
  }
  try {
    if (!write_dir.empty()) {
      write_cifar(write_dir, synthetic_n, synthetic_n / 4 + 10, seed);
      std::printf("wrote a synthetic CIFAR-10 set (%d training, %d test images) to %s\n",
                  synthetic_n, synthetic_n / 4 + 10, write_dir.c_str());
      return 0;
    }
    soma::set_seed(seed);
    Tensor x_train, y_train, x_test, y_test;
    if (!dir.empty()) {
      auto d = soma::data::load_cifar10(dir);
      x_train = head(d.x_train, train_samples), y_train = head(d.y_train, train_samples);
      x_test = head(d.x_test, test_samples), y_test = head(d.y_test, test_samples);
      std::printf("CIFAR-10 from %s\n", dir.c_str());
    } else {
      std::printf(
          "No --data DIR given. To train on CIFAR-10, download the \"CIFAR-10 binary version\"\n"
          "(cifar-10-binary.tar.gz, 162 MB) from https://www.cs.toronto.edu/~kriz/cifar.html,\n"
          "unpack it (tar xzf cifar-10-binary.tar.gz) and run: cnn_cifar10 --data "
          "cifar-10-batches-bin\nTraining on %d synthetic striped images instead.\n",
          synthetic_n);
      const int n_test = synthetic_n / 4 + 10;
      Images tr = synthetic(synthetic_n, seed), te = synthetic(n_test, seed + 1);
      x_train = soma::constant(tr.x, {synthetic_n, 3, kSide, kSide});
      y_train = soma::constant(tr.y, {synthetic_n});
      x_test = soma::constant(te.x, {n_test, 3, kSide, kSide});
      y_test = soma::constant(te.y, {n_test});
    }
    // u8 pixels -> f32 in [0, 1], channels first ([N, 3, 32, 32]) as Conv2D takes them.
    auto scale = [](const Tensor& x) { return soma::cast(x, soma::DType::f32) / 255.0; };
    std::printf("%lld training and %lld test images\n", static_cast<long long>(x_train.dim(0)),
                static_cast<long long>(x_test.dim(0)));

    nn::Sequential model{
        nn::Input({3, kSide, kSide}),
        nn::Conv2D(16, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2),
        nn::Conv2D(32, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2),
        nn::Flatten(), nn::Dense(64, nn::relu), nn::Dense(10)};
    model.to(device);
    model.compile(soma::optim::Adam({.learning_rate = 1e-3}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {soma::metrics::Accuracy()});
    model.summary();
    model.fit(scale(x_train), y_train,
              {.epochs = epochs, .batch_size = 32,
               .validation_data = nn::ValidationData(scale(x_test), y_test)});
    auto logs = model.evaluate(scale(x_test), y_test, {.batch_size = 256, .verbose = 0});
    const double accuracy = logs.at("accuracy");
    std::printf("test accuracy: %.4f  test loss: %.4f\n", accuracy, logs.at("loss"));
    if (min_accuracy >= 0.0 && accuracy < min_accuracy) {
      std::printf("check: FAILED (accuracy %.4f < %.4f)\n", accuracy, min_accuracy);
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "cnn_cifar10: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
