// The Keras "basic classification" tutorial network: Flatten, Dense 128 relu, Dense 128 relu,
// Dense 10 (logits), Adam and sparse categorical cross-entropy, 5 epochs. Fashion-MNIST by
// default (Debian's dataset-fashion-mnist package installs it in
// /usr/share/datasets/fashion-mnist); MNIST, or any data set in the same IDX files, with --data.
//
//   mnist_mlp [--data DIR] [--epochs N] [--train-samples N] [--test-samples N]
//             [--batch-size N] [--min-accuracy A]
//
// DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte (each optionally .gz). --min-accuracy exits non-zero when the test
// accuracy ends below A. Without --data and without Fashion-MNIST installed it exits with 77
// (the code CTest takes for a skipped test).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;
using soma::Tensor;

namespace {

// The first n samples (all of them when n <= 0 or n is larger than the set).
Tensor head(const Tensor& t, long n) {
  return n > 0 && n < t.dim(0) ? t.slice(0, 0, n) : t;
}

// u8 pixels 0..255 -> f32 in [0, 1]; labels stay integer class ids for the sparse loss.
Tensor scale(const Tensor& x) { return soma::cast(x, soma::DType::f32) / 255.0; }

}  // namespace

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  std::string dir = soma::data::kFashionMnistDir;
  int epochs = 5;
  long batch_size = 32, train_samples = 0, test_samples = 0;
  double min_accuracy = -1.0;
  bool dir_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) dir = argv[++i], dir_given = true;
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--batch-size" && i + 1 < argc) batch_size = std::atol(argv[++i]);
    else if (a == "--train-samples" && i + 1 < argc) train_samples = std::atol(argv[++i]);
    else if (a == "--test-samples" && i + 1 < argc) test_samples = std::atol(argv[++i]);
    else if (a == "--min-accuracy" && i + 1 < argc) min_accuracy = std::atof(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: mnist_mlp [--data DIR] [--epochs N] [--train-samples N] "
                   "[--test-samples N] [--batch-size N] [--min-accuracy A]\n");
      return 2;
    }
  }
  if (!dir_given && !std::filesystem::is_directory(dir)) {
    std::fprintf(stderr,
                 "mnist_mlp: no data in %s. Install Fashion-MNIST with `apt-get install "
                 "dataset-fashion-mnist`, or pass --data DIR with the four MNIST IDX files.\n",
                 dir.c_str());
    return 77;
  }
  try {
    soma::set_seed(42);
    auto d = soma::data::load_mnist(dir);
    Tensor x_train = scale(head(d.x_train, train_samples)), y_train = head(d.y_train, train_samples);
    Tensor x_test = scale(head(d.x_test, test_samples)), y_test = head(d.y_test, test_samples);
    std::printf("data: %s (%lld training and %lld test images of %lldx%lld)\n", dir.c_str(),
                static_cast<long long>(x_train.dim(0)), static_cast<long long>(x_test.dim(0)),
                static_cast<long long>(x_train.dim(1)), static_cast<long long>(x_train.dim(2)));

    nn::Sequential model{nn::Input({x_train.dim(1), x_train.dim(2)}), nn::Flatten(),
                         nn::Dense(128, nn::relu), nn::Dense(128, nn::relu), nn::Dense(10)};
    model.to(device);
    model.compile(soma::optim::Adam({.learning_rate = 1e-3}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {soma::metrics::Accuracy()});
    model.summary();
    model.fit(x_train, y_train, {.epochs = epochs, .batch_size = batch_size});
    auto logs = model.evaluate(x_test, y_test, {.batch_size = 256, .verbose = 0});
    const double accuracy = logs.at("accuracy");
    std::printf("test accuracy: %.4f  test loss: %.4f\n", accuracy, logs.at("loss"));

    // The predicted class of the first few test images, next to the truth.
    auto predicted = soma::argmax(soma::examples::host(model.predict(x_test.slice(0, 0, 10))), -1);
    auto p = predicted.to_vector<std::int64_t>();
    auto t = soma::cast(y_test.slice(0, 0, 10), soma::DType::i64).to_vector<std::int64_t>();
    std::printf("first test images: predicted");
    for (auto v : p) std::printf(" %lld", static_cast<long long>(v));
    std::printf(", true");
    for (auto v : t) std::printf(" %lld", static_cast<long long>(v));
    std::printf("\n");

    if (min_accuracy >= 0.0 && accuracy < min_accuracy) {
      std::printf("check: FAILED (accuracy %.4f < %.4f)\n", accuracy, min_accuracy);
      return 1;
    }
  } catch (const soma::Error& e) {
    std::cerr << "mnist_mlp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
