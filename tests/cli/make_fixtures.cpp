// Writes the small files the `soma` command-line tests use into a directory:
//   train-images-idx3-ubyte, train-labels-idx1-ubyte (300 samples), t10k-images-idx3-ubyte,
//   t10k-labels-idx1-ubyte (100), shoe.png (28x28 grey), my_model.json (soma's short config
//   form), keras_model.json (Keras' model config form) and bad_model.json (a Dense whose
//   units is misspelt unitz), and nan_data/: an IDX set whose training images are f32 with one NaN pixel.
// Each class draws a bright 6x6 square at its own place over faint noise, so a network learns
// the set in one epoch; the point is a fast, deterministic run of the whole tool.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <soma/image.hpp>
#include <soma/model/sequential.hpp>
#include <soma/model/serialization.hpp>
#include <soma/nn/layers.hpp>
#include <soma/nn/normalization.hpp>
#include <soma/ops.hpp>

namespace {

void put_u32(std::ofstream& f, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24),
                              static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}

std::vector<std::uint8_t> draw(int label, std::mt19937& rng) {
  std::vector<std::uint8_t> img(28 * 28);
  std::uniform_int_distribution<int> noise(0, 40);
  for (auto& p : img) p = static_cast<std::uint8_t>(noise(rng));
  const int top = 2 + (label / 5) * 12, left = 1 + (label % 5) * 5;
  for (int r = top; r < top + 6; ++r)
    for (int c = left; c < left + 6 && c < 28; ++c) img[r * 28 + c] = 230;
  return img;
}

void write_split(const std::string& dir, const std::string& prefix, int n, std::mt19937& rng) {
  std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
  put_u32(images, 0x00000803);
  put_u32(images, n);
  put_u32(images, 28);
  put_u32(images, 28);
  put_u32(labels, 0x00000801);
  put_u32(labels, n);
  for (int i = 0; i < n; ++i) {
    const int label = i % 10;
    const auto img = draw(label, rng);
    images.write(reinterpret_cast<const char*>(img.data()), std::streamsize(img.size()));
    const char l = static_cast<char>(label);
    labels.write(&l, 1);
  }
}

// Model files whose weights `soma summary` / `soma eval` must report: nan_model.soma (3 NaN and
// 1 inf in the Dense kernel) and bad_variance.soma (a BatchNormalization with 5 moving
// variances of -1).
void write_invalid_models(const std::string& dir) {
  using namespace soma;
  {
    nn::Sequential m{nn::Input({1, 28, 28}), nn::Flatten(), nn::Dense(10)};
    auto w = m.get_weights();
    std::vector<float> k = w.at("1.kernel").to_vector<float>();
    k[0] = k[5] = k[9] = std::numeric_limits<float>::quiet_NaN();
    k[11] = std::numeric_limits<float>::infinity();
    w["1.kernel"] = constant(k, w.at("1.kernel").shape());
    m.set_weights(w);
    m.save(dir + "/nan_model.soma");
  }
  {
    nn::Sequential m{nn::Input({1, 28, 28}), nn::Flatten(), nn::BatchNormalization(), nn::Dense(10)};
    auto w = m.get_weights();
    std::vector<float> v(784, 1.0f);
    for (int i = 0; i < 5; ++i) v[i] = -1.0f;
    w["1.moving_variance"] = constant(v, {784});
    m.set_weights(w);
    m.save(dir + "/bad_variance.soma");
  }
}

// The same set with f32 training images (IDX type 0x0D, big-endian) and a NaN in one pixel of
// sample `nan_sample`: training on it must stop rather than save a NaN model.
void write_nan_split(const std::string& dir, int n, int nan_sample, std::mt19937& rng) {
  std::ofstream images(dir + "/train-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir + "/train-labels-idx1-ubyte", std::ios::binary);
  put_u32(images, 0x00000D03);
  put_u32(images, n);
  put_u32(images, 28);
  put_u32(images, 28);
  put_u32(labels, 0x00000801);
  put_u32(labels, n);
  for (int i = 0; i < n; ++i) {
    const int label = i % 10;
    const auto img = draw(label, rng);
    for (std::size_t k = 0; k < img.size(); ++k) {
      float v = float(img[k]) / 255.0f;
      if (i == nan_sample && k == 300) v = std::numeric_limits<float>::quiet_NaN();
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      put_u32(images, bits);
    }
    const char l = static_cast<char>(label);
    labels.write(&l, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fixtures DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937 rng(7);
  write_split(dir, "train", 300, rng);
  write_split(dir, "t10k", 100, rng);
  const auto shoe = draw(7, rng);
  soma::image::write_png(soma::constant(shoe, {28, 28, 1}), dir + "/shoe.png");
  std::ofstream(dir + "/my_model.json")
      << R"({"layers": [{"type": "Flatten"},
                {"type": "Dense", "units": 32, "activation": "relu"},
                {"type": "Dense", "units": 10}]})"
      << "\n";
  std::ofstream(dir + "/keras_model.json")
      << R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [
  {"class_name": "InputLayer", "config": {"batch_shape": [null, 1, 28, 28]}},
  {"class_name": "Conv2D", "config": {"filters": 4, "kernel_size": [3, 3], "activation": "relu"}},
  {"class_name": "MaxPooling2D", "config": {"pool_size": [2, 2]}},
  {"class_name": "Flatten", "config": {}},
  {"class_name": "Dense", "config": {"units": 10}}]}})"
      << "\n";
  std::ofstream(dir + "/bad_model.json")
      << R"({"layers": [{"type": "Flatten"}, {"type": "Dense", "unitz": 10}]})" << "\n";
  // A classifier ending with a softmax: its outputs are probabilities (issue 19).
  std::ofstream(dir + "/softmax_model.json")
      << R"({"layers": [{"type": "Flatten"},
                {"type": "Dense", "units": 32, "activation": "relu"},
                {"type": "Dense", "units": 10, "activation": "softmax"}]})"
      << "\n";
  write_invalid_models(dir);
  std::filesystem::create_directories(dir + "/nan_data");
  write_nan_split(dir + "/nan_data", 60, 17, rng);
  write_split(dir + "/nan_data", "t10k", 20, rng);
  return 0;
}
