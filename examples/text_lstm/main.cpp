// A character-level LSTM: it reads the last `window` characters of a repeated text and learns
// to predict the next one, then writes the text on its own, one character at a time (greedy:
// the most likely next character is fed back as input). The recurrent layer carries what it has
// read in its state h, c; the model is Embedding -> LSTM -> Dense(vocabulary).
//
//   text_lstm [--text "..."] [--window T] [--units U] [--epochs N] [--generate N] [--seed S]
//             [--check]
//
// --check exits non-zero unless the model predicts at least 95% of the next characters right
// and its generated text matches the real continuation in at least 95% of the characters.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;
using soma::Tensor;

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  std::string text = "the quick brown fox jumps over the lazy dog; soma learns it by heart. ";
  int window = 10, units = 64, epochs = 60, generate = 140;
  unsigned long seed = 3;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--text" && i + 1 < argc) text = argv[++i];
    else if (a == "--window" && i + 1 < argc) window = std::atoi(argv[++i]);
    else if (a == "--units" && i + 1 < argc) units = std::atoi(argv[++i]);
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--generate" && i + 1 < argc) generate = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr,
                   "usage: text_lstm [--text STR] [--window T] [--units U] [--epochs N] "
                   "[--generate N] [--seed S] [--check]\n");
      return 2;
    }
  }
  if (window < 1 || text.size() < 2) {
    std::fprintf(stderr, "text_lstm: need --window >= 1 and a text of at least 2 characters\n");
    return 2;
  }
  soma::set_seed(seed);

  // The vocabulary: each distinct character gets an id.
  std::map<char, int> id;
  std::vector<char> chars;
  for (char c : text)
    if (id.emplace(c, int(chars.size())).second) chars.push_back(c);
  const std::int64_t vocab = std::int64_t(chars.size());

  // One sample per position of the (cyclic) text: the `window` characters before it -> it.
  const std::int64_t n = std::int64_t(text.size());
  auto at = [&](std::int64_t i) { return text[std::size_t(i % n)]; };
  std::vector<float> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t t = 0; t < window; ++t) xs.push_back(float(id[at(i + t)]));
    ys.push_back(float(id[at(i + window)]));
  }
  const Tensor x = soma::constant(xs, {n, window});  // character ids; Embedding truncates them
  const Tensor y = soma::constant(ys, {n});
  std::printf("text: \"%s\" (%lld characters, %lld distinct), window %d\n", text.c_str(),
              static_cast<long long>(n), static_cast<long long>(vocab), window);

  nn::Sequential model{nn::Input({window}), nn::Embedding(vocab, 16), nn::LSTM(units),
                       nn::Dense(vocab)};
  model.to(device);
  model.compile(soma::optim::Adam({.learning_rate = 0.01}),
                nn::SparseCategoricalCrossentropy({.from_logits = true}),
                {soma::metrics::Accuracy()});
  model.summary();
  auto h = model.fit(x, y, {.epochs = epochs, .batch_size = 32, .verbose = 0, .seed = seed});
  const double accuracy = h.history.at("accuracy").back();
  std::printf("after %d epochs: loss %.4f, next-character accuracy %.3f\n", epochs,
              h.history.at("loss").back(), accuracy);

  // Generation: start from the first window of the text, then feed each prediction back.
  std::vector<float> context(xs.begin(), xs.begin() + window);
  std::string generated;
  int matches = 0;
  for (int k = 0; k < generate; ++k) {
    Tensor logits = soma::examples::host(model.predict(soma::constant(context, {1, window})));
    const int next = int(soma::argmax(logits, -1).item<std::int64_t>());
    generated += chars[std::size_t(next)];
    matches += chars[std::size_t(next)] == at(window + k);
    context.erase(context.begin());
    context.push_back(float(next));
  }
  std::printf("generated from \"%s\":\n%s\n", text.substr(0, std::size_t(window)).c_str(),
              generated.c_str());
  const double match = generate > 0 ? double(matches) / generate : 1.0;
  std::printf("%d/%d generated characters match the text (%.1f%%)\n", matches, generate,
              100.0 * match);

  if (check) {
    const bool ok = accuracy >= 0.95 && match >= 0.95;
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
