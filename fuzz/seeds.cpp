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

// ---- hostile seeds (issue 20): deep nesting, huge sizes, INT_MIN --------------------------------
// Named refuse_*: `fuzz_replay --accept` checks that each one is refused with a soma::Error (and a
// short message). Each stays under libFuzzer's -max_len (65536 bytes, scripts/sanitize-lib.sh).
std::string nested(std::size_t levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}
std::string nested_objects(std::size_t levels) {
  std::string s;
  for (std::size_t i = 0; i < levels; ++i) s += R"({"a":)";
  return s + "1" + std::string(levels, '}');
}
std::string sequential_with_input_shape(const std::string& dims) {
  return R"({"class_name":"Sequential","config":{"name":"s","input_shape":[-1,)" + dims + R"(],"layers":[]}})";
}
std::string dense_config(const std::string& input, const std::string& units) {
  return R"({"class_name":"Sequential","config":{"name":"s","input_shape":[-1,)" + input +
         R"(],"layers":[{"class_name":"Dense","config":{"name":"d","units":)" + units +
         R"(,"activation":"linear","use_bias":true,"kernel_initializer":{"class_name":"zeros"},)"
         R"("bias_initializer":{"class_name":"zeros"},"kernel_regularizer":null,"bias_regularizer":null,)"
         R"("dtype":"f32"}}]}})";
}
std::string functional_chain(int n) {  // layer i consumes layer i-1, listed in reverse order
  std::string s = R"({"class_name":"Functional","config":{"name":"chain","layers":[)";
  for (int i = n; i >= 1; --i)
    s += R"({"class_name":"ReLU","name":"r)" + std::to_string(i) + R"(","config":{},"inbound_nodes":[[[")" +
         (i == 1 ? std::string("in") : "r" + std::to_string(i - 1)) + R"(",0,0]]]},)";
  s += R"({"class_name":"InputLayer","name":"in","config":{"batch_shape":[-1,1],"name":"in"},"inbound_nodes":[]}],)";
  return s + R"("input_layers":[["in",0,0]],"output_layers":[["r)" + std::to_string(n) + R"(",0,0]]}})";
}
std::string functional_with_ref(const std::string& ref) {
  return R"({"class_name":"Functional","config":{"name":"f","layers":[)"
         R"({"class_name":"InputLayer","name":"in","config":{"batch_shape":[-1,4],"name":"in"},"inbound_nodes":[]},)"
         R"({"class_name":"ReLU","name":"r","config":{},"inbound_nodes":[[)" + ref +
         R"(]]}],"input_layers":[["in",0,0]],"output_layers":[["r",0,0]]}})";
}
// The payload of a model file (targets/model_file.cpp wraps it when byte 0 is odd).
Bytes model_payload(const std::string& header) {
  Bytes b;
  auto put64 = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(std::uint8_t(v >> (8 * i)));
  };
  put64(header.size());
  b.insert(b.end(), header.begin(), header.end());
  put64(0);
  return b;
}
std::string model_header(const std::string& model) {
  return R"({"format":"soma-model","model":)" + model + R"(,"weights":[],"compile":null})";
}
void be32_to(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
}
Bytes png_chunk(const std::string& type, const Bytes& data) {
  Bytes body(type.begin(), type.end());
  body.insert(body.end(), data.begin(), data.end());
  Bytes out;
  be32_to(out, std::uint32_t(data.size()));
  out.insert(out.end(), body.begin(), body.end());
  be32_to(out, std::uint32_t(crc32(0L, body.data(), uInt(body.size()))));
  return out;
}
Bytes png_with_header(std::uint32_t w, std::uint32_t h, std::uint8_t colour) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  be32_to(ihdr, w);
  be32_to(ihdr, h);
  for (std::uint8_t v : {std::uint8_t(8), colour, std::uint8_t(0), std::uint8_t(0), std::uint8_t(0)}) ihdr.push_back(v);
  for (auto& c : {png_chunk("IHDR", ihdr), png_chunk("IDAT", gzip(Bytes(4096, 0))), png_chunk("IEND", {})})
    png.insert(png.end(), c.begin(), c.end());
  return png;
}
// An ONNX ModelProto nested `levels` x 3 messages deep (graph -> node -> attribute -> g -> ...).
Bytes nested_onnx(int levels) {
  const int fields[3] = {1, 5, 6};  // GraphProto.node, NodeProto.attribute, AttributeProto.g
  auto wrap = [](int field, const Bytes& inner) {
    Bytes out = {std::uint8_t((field << 3) | 2)};
    std::uint64_t v = inner.size();
    do {
      std::uint8_t b = std::uint8_t(v & 0x7F);
      v >>= 7;
      out.push_back(v ? std::uint8_t(b | 0x80) : b);
    } while (v);
    out.insert(out.end(), inner.begin(), inner.end());
    return out;
  };
  Bytes msg;
  for (int i = 3 * levels - 1; i >= 0; --i) msg = wrap(fields[i % 3], msg);
  return wrap(7, msg);  // ModelProto.graph
}

void hostile_seeds() {
  // model_config: deep nesting where a recursive dump used to overflow the stack; absurd sizes;
  // INT_MIN and INT64_MIN values; a long chain listed backwards (accepted).
  write("model_config", "refuse_deep_arrays_300", text(sequential_with_input_shape(nested(300))));
  write("model_config", "refuse_deep_arrays_30000", text(sequential_with_input_shape(nested(30000))));
  write("model_config", "refuse_deep_objects_300", text(sequential_with_input_shape(nested_objects(300))));
  write("model_config", "refuse_cli_deep_units", text(R"({"layers":[{"type":"Dense","units":)" + nested(300) + "}]}"));
  write("model_config", "refuse_functional_deep_reference", text(functional_with_ref(nested(300, R"("in",0,0)"))));
  // (the CLI reader skips the references and builds this one; the library refuses it)
  write("model_config", "functional_reference_int_min", text(functional_with_ref(R"(["in",-2147483648,0])")));
  write("model_config", "refuse_dense_1e12_units", text(dense_config("1000000", "1000000000000")));
  write("model_config", "refuse_cli_dense_1e12_units", text(R"({"layers":[{"type":"Flatten"},{"type":"Dense","units":1000000000000}]})"));
  write("model_config", "refuse_dense_units_int_min", text(dense_config("4", "-2147483648")));
  write("model_config", "refuse_dense_units_int64_min", text(dense_config("4", "-9223372036854775808")));
  write("model_config", "refuse_input_dim_int_min", text(sequential_with_input_shape("-2147483648")));
  write("model_config", "refuse_cli_conv_kernel_int_min",
        text(R"({"layers":[{"type":"Conv2D","filters":2,"kernel_size":-2147483648}]})"));
  write("model_config", "functional_chain_300_reversed", text(functional_chain(300)));
  // model_file (byte 0 = 1: the rest is a payload wrapped in a valid container).
  write("model_file", "refuse_header_deep_300",
        with_prefix(1, model_payload(model_header(sequential_with_input_shape(nested(300))))));
  write("model_file", "refuse_header_deep_30000",
        with_prefix(1, model_payload(model_header(sequential_with_input_shape(nested(30000))))));
  write("model_file", "refuse_dense_1e12_parameters",
        with_prefix(1, model_payload(model_header(dense_config("1000000", "1000000")))));
  write("model_file", "refuse_dense_units_int_min",
        with_prefix(1, model_payload(model_header(dense_config("4", "-2147483648")))));
  write("model_file", "refuse_payload_header_length_huge", with_prefix(1, Bytes(8, 0xFF)));
  // idx: dims beyond the data (and 2^31, INT_MIN, 2^32-1), raw and gzip.
  Bytes idx_huge = {0, 0, 0x0D, 3};
  for (int i = 0; i < 3; ++i) be32_to(idx_huge, 65535);
  write("idx", "refuse_dims_65535_cubed", idx_huge);
  Bytes idx_int_min = {0, 0, 0x08, 1};
  be32_to(idx_int_min, 0x80000000u);
  write("idx", "refuse_dim_int_min", idx_int_min);
  Bytes idx_max = {0, 0, 0x0E, 8};
  for (int i = 0; i < 8; ++i) be32_to(idx_max, 0xFFFFFFFFu);
  write("idx", "refuse_rank8_dims_4294967295", idx_max);
  Bytes idx_gz = {0, 0, 0x08, 1};
  be32_to(idx_gz, 0x7FFFFFFFu);
  idx_gz.resize(idx_gz.size() + 4096, 0);
  write("idx", "refuse_gz_claims_2gb", gzip(idx_gz));
  // cifar: a record short; a label out of range; many records of zeros from a small gzip file.
  write("cifar", "refuse_truncated_record", Bytes(3072, 0));
  Bytes bad_label(3073, 0);
  bad_label[0] = 0x80;
  write("cifar", "refuse_label_128", bad_label);
  write("cifar", "zeros_300_records_gz", gzip(Bytes(3073 * 300, 0)));
  // csv: extreme labels and values that still load; a value out of double range that does not.
  write("csv", "label_int32_min", with_prefix(1 | (3 << 3) | (3 << 5), text("a,label\n1,-2147483648\n2,2147483647\n")));
  write("csv", "label_3000000_value_int64_min", with_prefix(1 | (3 << 3), text("a,label\n-9223372036854775808,3000000\n2,0\n")));
  write("csv", "refuse_value_1e400", with_prefix(1, text("a,b\n1,1e400\n")));
  write("csv", "refuse_label_int32_min_as_u8", with_prefix(1 | (3 << 3) | (1 << 5), text("a,label\n1,-2147483648\n")));
  {
    std::string wide = "c0";
    for (int i = 1; i < 6000; ++i) wide += "," + std::to_string(i);
    write("csv", "refuse_wide_header_missing_label", with_prefix(1 | (3 << 3), text(wide + "\n")));
  }
  // png: decompression bombs and INT_MIN sides, refused from the header.
  write("png", "refuse_bomb_16384x16384_rgb", with_prefix(0, png_with_header(16384, 16384, 2)));
  write("png", "refuse_bomb_16384x16384_grey_as_rgba", with_prefix(3, png_with_header(16384, 16384, 0)));
  write("png", "refuse_width_int_min", with_prefix(0, png_with_header(0x80000000u, 1, 0)));
  write("png", "refuse_height_4294967295", with_prefix(0, png_with_header(1, 0xFFFFFFFFu, 0)));
  // onnx: messages nested beyond protobuf's recursion limit (100).
  if (onnx::available()) {
    write("onnx", "refuse_nested_3000_messages", nested_onnx(1000));
    write("onnx", "refuse_nested_150_messages", nested_onnx(50));
  }
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
  hostile_seeds();
  std::printf("seed corpus written to %s\n", g_out.c_str());
  return 0;
}
