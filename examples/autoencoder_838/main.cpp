// The 8-3-8 auto-encoder (Rumelhart, Hinton and Williams, 1986). Eight one-hot inputs must pass
// through three sigmoid units and come out again, so the network has to invent a code: with
// training, the three hidden values of each input settle near the corners of the unit cube, a
// 3-bit binary code with one distinct corner per input.
//
//   autoencoder_838 [--epochs N] [--seed S] [--check] [--device cuda]
//
// --check exits non-zero unless every input is reconstructed and the eight codes, thresholded
// at 0.5, are eight distinct corners.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  int epochs = 3000;
  unsigned long seed = 7;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr, "usage: autoencoder_838 [--epochs N] [--seed S] [--check]\n");
      return 2;
    }
  }
  soma::set_seed(seed);

  // Keep a handle on the encoder layer to read the hidden code after training.
  nn::ModuleRef encoder = nn::Dense(3, nn::sigmoid);
  nn::Sequential model{nn::Input({8}), encoder, nn::Dense(8)};
  model.to(device);
  // Softmax cross-entropy over the eight outputs: the decoder has to name the input back.
  model.compile(soma::optim::Adam({.learning_rate = 0.05}),
                nn::CategoricalCrossentropy({.from_logits = true}));
  model.summary();

  const soma::Tensor x = soma::eye(8);  // the eight one-hot inputs; the target is the input
  auto history = model.fit(x, x, {.epochs = epochs, .batch_size = 8, .verbose = 0, .seed = seed});
  std::printf("loss after %d epochs: %.5f\n", epochs, history.history.at("loss").back());

  soma::Tensor code = soma::examples::host((*encoder)(x.to(device)));                        // [8, 3] in (0, 1)
  auto decoded = soma::argmax(soma::examples::host(model.predict(x)), -1).to_vector<std::int64_t>();
  auto h = code.to_vector<float>();
  std::set<int> corners;
  int reconstructed = 0;
  std::printf("input     hidden code            bits  decoded\n");
  for (int i = 0; i < 8; ++i) {
    int bits = 0;
    for (int j = 0; j < 3; ++j) bits = bits * 2 + (h[std::size_t(3 * i + j)] > 0.5f);
    corners.insert(bits);
    reconstructed += decoded[std::size_t(i)] == i;
    std::printf("one-hot %d  [%.3f %.3f %.3f]  %d%d%d   %lld\n", i, h[std::size_t(3 * i)],
                h[std::size_t(3 * i + 1)], h[std::size_t(3 * i + 2)], (bits >> 2) & 1,
                (bits >> 1) & 1, bits & 1, static_cast<long long>(decoded[std::size_t(i)]));
  }
  std::printf("%d/8 inputs reconstructed; %zu distinct corners of the cube\n", reconstructed,
              corners.size());

  if (check) {
    bool ok = reconstructed == 8 && corners.size() == 8;
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
