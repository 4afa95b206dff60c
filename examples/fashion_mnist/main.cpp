// Trains the classic MLP (784-128-128-10, Adam, batch 32) on Fashion-MNIST with the Keras-style
// API and prints the test accuracy. Data: Debian's dataset-fashion-mnist package, or a directory
// named on the command line holding the four IDX files.
//   fashion_mnist [DIR] [EPOCHS] [--device cuda]   (or SOMA_DEVICE=cuda; example_device.hpp)
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <soma/soma.hpp>

#include "example_device.hpp"

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  const char* dir = argc > 1 ? argv[1] : soma::data::kFashionMnistDir;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 5;
  try {
    soma::set_seed(42);
    auto d = soma::data::load_fashion_mnist(dir);
    // Pixels to [0, 1]; labels stay integer class ids for the sparse loss.
    auto scale = [](const soma::Tensor& x) { return soma::cast(x, soma::DType::f32) / 255.0; };

    soma::nn::Sequential model{soma::nn::Input({28, 28}), soma::nn::Flatten(),
                               soma::nn::Dense(128, soma::nn::relu),
                               soma::nn::Dense(128, soma::nn::relu), soma::nn::Dense(10)};
    model.to(device);  // before compile: the optimiser's state is made where the weights are
    model.compile(soma::optim::Adam({.learning_rate = 1e-3}),
                  soma::nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {soma::metrics::Accuracy()});
    model.summary();
    model.fit(scale(d.x_train), d.y_train,
              {.epochs = epochs, .batch_size = 32,
               .validation_data = soma::nn::ValidationData(scale(d.x_test), d.y_test)});
    auto logs = model.evaluate(scale(d.x_test), d.y_test, {.batch_size = 256, .verbose = 0});
    std::printf("test accuracy: %.4f  test loss: %.4f\n", logs.at("accuracy"), logs.at("loss"));
  } catch (const soma::Error& e) {
    std::cerr << "fashion_mnist: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
