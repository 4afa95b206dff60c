// Writes the seed corpus: small valid inputs for every fuzz target, one directory per target.
//   fuzz_seeds OUTDIR
// Seeds are generated (not stored in the repository) so that they follow the formats as the
// code writes them today; `fuzz_replay --accept OUTDIR` checks that each one loads.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"

namespace fs = std::filesystem;
using namespace soma;
using Bytes = std::vector<std::uint8_t>;

namespace {

fs::path g_out;

void write(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(g_out / target);
  std::ofstream(g_out / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

Bytes with_prefix(std::uint8_t p, const Bytes& b) {
  Bytes out(b.size() + 1);
  out[0] = p;
  std::copy(b.begin(), b.end(), out.begin() + 1);
  return out;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes gzip(const Bytes& raw) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // +16: gzip wrapper
  Bytes out(deflateBound(&z, uLong(raw.size())) + 64);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = uInt(raw.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

Bytes idx_file(std::uint8_t type, std::vector<std::uint32_t> dims, std::size_t elem) {
  Bytes b = {0, 0, type, std::uint8_t(dims.size())};
  std::size_t n = 1;
  for (auto d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(d >> s));
    n *= d;
  }
  for (std::size_t i = 0; i < n * elem; ++i) b.push_back(std::uint8_t(i * 7 + 1));
  return b;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void model_seeds() {
  const std::string tmp = (fs::temp_directory_path() / ("soma_seed_" + std::to_string(::getpid()) + ".soma")).string();
  int k = 0;
  auto save = [&](nn::Model& m, bool weights_only = false) {
    if (weights_only) m.save_weights(tmp);
    else m.save(tmp);
    Bytes f = read_bytes(tmp);
    const std::uint8_t w = weights_only ? 4 : 0;
    write("model_file", "raw_" + std::to_string(k), with_prefix(w, f));
    // Payload only, for the wrapping mode (byte 0 odd; kind 2 = weights).
    Bytes payload(f.begin() + 28, f.end());
    write("model_file", "wrapped_" + std::to_string(k), with_prefix(std::uint8_t(w | 1 | (weights_only ? 2 : 0)), payload));
    if (!weights_only) {
      auto cfg = serialization::model_config(m);
      write("model_config", "keras_" + std::to_string(k), text(cfg));
    }
    ++k;
  };
  {
    nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::Dense(2)};
    for (std::size_t i = 0; i < m.layers().size(); ++i) m.layers()[i]->set_name("l" + std::to_string(i));
    save(m, true);
    m.compile(optim::SGD({.momentum = 0.9}), nn::MeanSquaredError());
    save(m);
  }
  {
    nn::Sequential m{nn::Input({1, 8, 8}), nn::Conv2D(2, 3, {.activation = nn::relu}),
                     nn::MaxPool2D(2), nn::BatchNormalization(), nn::Flatten(),
                     nn::Dropout(0.25), nn::Dense(3, nn::softmax)};
    m.compile(optim::Adam(), nn::SparseCategoricalCrossentropy(), {metrics::Accuracy()});
    save(m);
  }
  {
    nn::Sequential m{nn::Input({5, 3}), nn::LSTM(4), nn::Dense(2)};
    save(m);
  }
  {
    nn::Sequential m{nn::Input({6}), nn::Embedding(10, 3), nn::Flatten(), nn::LayerNormalization(),
                     nn::Dense(2)};
    save(m);
  }
  fs::remove(tmp);
  if (onnx::available()) {  // ONNX files as soma exports them
    nn::Sequential a{nn::Input({4}), nn::Dense(3, nn::relu), nn::Dense(2, nn::softmax)};
    auto bytes = onnx::export_to_bytes(a);
    write("onnx", "mlp", Bytes(bytes.begin(), bytes.end()));
    nn::Sequential c{nn::Input({1, 6, 6}), nn::Conv2D(2, 3), nn::MaxPool2D(2), nn::BatchNormalization(),
                     nn::Flatten(), nn::Dense(2)};
    bytes = onnx::export_to_bytes(c);
    write("onnx", "cnn", Bytes(bytes.begin(), bytes.end()));
  }
  // The CLI's short form.
  write("model_config", "cli_dense",
        text(R"({"layers": [{"type": "Flatten"}, {"type": "Dense", "units": 8, "activation": "relu"}, {"type": "Dense", "units": 3}]})"));
  write("model_config", "cli_conv",
        text(R"({"layers": [{"type": "Conv2D", "filters": 2, "kernel_size": 3, "padding": "same"}, {"type": "MaxPool2D", "pool_size": 2}, {"type": "BatchNormalization"}, {"type": "Flatten"}, {"type": "Dropout", "rate": 0.5}, {"type": "Dense", "units": 2, "activation": "softmax"}]})"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
    return 2;
  }
  g_out = argv[1];
  // IDX: every element type, a few ranks, raw and gzip.
  const struct { std::uint8_t type; std::size_t elem; const char* name; } types[] = {
      {0x08, 1, "u8"}, {0x09, 1, "i8"}, {0x0B, 2, "i16"}, {0x0C, 4, "i32"}, {0x0D, 4, "f32"}, {0x0E, 8, "f64"}};
  for (auto& t : types) {
    write("idx", std::string("vec_") + t.name, idx_file(t.type, {5}, t.elem));
    write("idx", std::string("img_") + t.name, idx_file(t.type, {2, 3, 3}, t.elem));
  }
  write("idx", "images_gz", gzip(idx_file(0x08, {3, 4, 4}, 1)));
  write("idx", "labels_gz", gzip(idx_file(0x08, {3}, 1)));
  write("idx", "empty_dim", idx_file(0x08, {0, 4}, 1));
  // CIFAR-10: two records, raw and gzip.
  Bytes cifar;
  for (int r = 0; r < 2; ++r) {
    cifar.push_back(std::uint8_t(r * 3));
    for (int i = 0; i < 3072; ++i) cifar.push_back(std::uint8_t(i + r));
  }
  write("cifar", "two_records", cifar);
  write("cifar", "two_records_gz", gzip(cifar));
  // CSV: byte 0 is the options (see targets/csv.cpp): bit 0 header, bits 1-2 delimiter,
  // bits 3-4 label column (none, 0, -1, "label"), bits 5-6 label dtype.
  write("csv", "header_label", with_prefix(1 | (3 << 3), text("a,b,label\n1,2.5,0\n3,-4e2,1\n")));
  write("csv", "no_header", with_prefix(0, text("1,2,3\r\n4,5,6\r\n")));
  write("csv", "quoted", with_prefix(1 | (2 << 3), text("\"x\",\"y, z\",c\n\"1\",2,3\n\n4,\"5\",6")));
  write("csv", "semicolon", with_prefix(1 | (1 << 1) | (1 << 3), text("l;f1;f2\n0;1.5;2\n1;3;4\n")));
  write("csv", "tabs_f32_label", with_prefix(1 | (2 << 1) | (2 << 3) | (2 << 5), text("f\tt\n0.5\t1.25\n")));
  write("csv", "bom", with_prefix(1, text("\xEF\xBB\xBFu,v\n+1, 2 \n")));
  // PNG: each channel count, decoded as stored and converted.
  std::uint8_t opt = 0;
  for (int c : {1, 2, 3, 4}) {
    Tensor img = Tensor::empty({5, 7, c}, DType::u8);
    auto* p = img.data<std::uint8_t>();
    for (std::int64_t i = 0; i < img.numel(); ++i) p[i] = std::uint8_t(i * 13);
    auto png = image::encode_png(img);
    write("png", "c" + std::to_string(c), with_prefix(opt++ & 3, Bytes(png.begin(), png.end())));
  }
  model_seeds();
  std::printf("seed corpus written to %s\n", g_out.c_str());
  return 0;
}
