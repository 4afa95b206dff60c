// Hostile files (issue 20): deeply nested JSON, absurd sizes and decompression bombs get a clear
// soma::Error naming the field and the limit, quickly, before anything is parsed recursively or
// allocated. Cases that used to overflow the stack run in a child process (a gtest death test),
// so that a crash fails the test instead of ending the suite.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../../apps/soma/common.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"

namespace fs = std::filesystem;
using namespace soma;

namespace {

// ---- helpers ----------------------------------------------------------------------------------
std::string nested(std::size_t levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("soma_hostile_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::string& bytes) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// A model file (docs/model-format.md) with the given header JSON and no tensors.
std::string model_file_with_header(const std::string& header_json) {
  std::string payload;
  put<std::uint64_t>(payload, header_json.size());
  payload += header_json;
  put<std::uint64_t>(payload, 0);
  std::string f("SOMAMDL\0", 8);
  put<std::uint32_t>(f, serialization::kFormatVersion);
  put<std::uint32_t>(f, 1);  // a model
  put<std::uint64_t>(f, payload.size());
  put<std::uint32_t>(f, std::uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()),
                                            uInt(payload.size()))));
  return f + payload;
}

// The outcome of fn as an exit code: 0 when it threw soma::Error whose message contains `want`
// and is at most `max_len` characters long; otherwise non-zero, with the reason on stderr.
template <class F>
int refusal(F&& fn, const std::string& want, std::size_t max_len) {
  try {
    fn();
    std::fprintf(stderr, "no error was raised\n");
    return 2;
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.find(want) == std::string::npos) {
      std::fprintf(stderr, "message lacks '%s': %.400s\n", want.c_str(), m.c_str());
      return 3;
    }
    if (m.size() > max_len) {
      std::fprintf(stderr, "message of %zu characters (at most %zu expected): %.300s...\n", m.size(),
                   max_len, m.c_str());
      return 4;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "a non-soma exception escaped: %.300s\n", e.what());
    return 5;
  }
}

// Runs `stmt` in a child process; passes when it throws soma::Error containing `want` (a crash,
// such as a stack overflow, is a failure that the parent survives).
#define EXPECT_REFUSED_IN_CHILD(stmt, want)                                                          \
  do {                                                                                               \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                                  \
    EXPECT_EXIT(std::_Exit(refusal([&] { stmt; }, want, 1000)), ::testing::ExitedWithCode(0), ""); \
  } while (0)

#define EXPECT_REFUSED(stmt, want) EXPECT_EQ(refusal([&] { stmt; }, want, 1000), 0)

const char* kTooDeep = "JSON nests deeper than 256 levels";

std::string sequential_config_with_input_shape(const std::string& input_shape) {
  return R"({"class_name":"Sequential","config":{"name":"s","input_shape":[-1,)" + input_shape +
         R"(],"layers":[]}})";
}

// ---- 1. deeply nested JSON ----------------------------------------------------------------------
TEST(HostileJson, ModelConfigNested1e5LevelsIsRefused) {
  const std::string text = sequential_config_with_input_shape(nested(100000));
  EXPECT_REFUSED_IN_CHILD(serialization::model_from_config(text), kTooDeep);
}

TEST(HostileJson, ModelConfigNested1e6LevelsIsRefused) {
  const std::string text = sequential_config_with_input_shape(nested(1000000));
  EXPECT_REFUSED_IN_CHILD(serialization::model_from_config(text), kTooDeep);
}

TEST(HostileJson, DeeplyNestedObjectsAreRefusedToo) {
  std::string text = R"({"class_name":"Sequential","config":{"input_shape":[-1,)";
  for (int i = 0; i < 100000; ++i) text += R"({"a":)";
  text += "1" + std::string(100000, '}') + R"(],"layers":[]}})";
  EXPECT_REFUSED_IN_CHILD(serialization::model_from_config(text), kTooDeep);
}

TEST(HostileJson, ModelFileHeaderNested1e6LevelsIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file(
      "deep.soma", model_file_with_header(R"({"format":"soma-model","model":)" +
                                          sequential_config_with_input_shape(nested(1000000)) +
                                          R"(,"weights":[],"compile":null})"));
  EXPECT_REFUSED_IN_CHILD(load_model(path), "'" + path + "': the header: " + kTooDeep);
}

TEST(HostileJson, CheckpointTrainingStateNested1e6LevelsIsRefused) {
  TempDir dir;
  const std::string path =
      dir.file("deep.ckpt", model_file_with_header(R"({"format":"soma-model","training":{"epoch":)" +
                                                   nested(1000000) + "}}"));
  EXPECT_REFUSED_IN_CHILD(load_checkpoint(path), kTooDeep);
}

TEST(HostileJson, CliConfigNested1e6LevelsIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file(
      "deep.json", R"({"layers":[{"type":"Dense","units":)" + nested(1000000) + "}]}");
  EXPECT_REFUSED_IN_CHILD(cli::model_from_config(path, Shape{1, 8, 8}), path + ": " + kTooDeep);
}

TEST(HostileJson, FunctionalLayerReferenceNested1e5LevelsIsRefused) {
  const std::string text =
      R"({"class_name":"Functional","config":{"name":"f","layers":[)"
      R"({"class_name":"InputLayer","name":"in","config":{"batch_shape":[-1,4],"name":"in"},"inbound_nodes":[]},)"
      R"({"class_name":"ReLU","name":"r","config":{},"inbound_nodes":[[)" +
      nested(100000, R"("in",0,0)") +
      R"(]]}],"input_layers":[["in",0,0]],"output_layers":[["r",0,0]]}})";
  EXPECT_REFUSED_IN_CHILD(serialization::model_from_config(text), kTooDeep);
}

TEST(HostileJson, NestingWithinTheLimitAndBracketsInStringsAreAccepted) {
  nn::Sequential m{nn::Input({4}), nn::Dense(2)};
  std::string cfg = serialization::model_config(m);
  // 250 levels in an extra field, and a layer name full of brackets and escaped quotes.
  cfg.insert(cfg.size() - 1, R"(,"extra":)" + nested(250) + R"(,"note":"\"[[[[)" +
                                 std::string(1000, '[') + R"(")");
  EXPECT_NO_THROW(serialization::model_from_config(cfg));
}

TEST(HostileJson, ErrorMessagesQuoteAtMost200CharactersOfAValue) {
  const std::string big(1000000, 'x');
  // An integer field given a 1 MB string: the library's reader...
  EXPECT_REFUSED(serialization::model_from_config(sequential_config_with_input_shape("\"" + big + "\"")),
                 "expected an integer");
  // ... a 10000-element array where an integer belongs (a deep value would be cut the same way) ...
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += (i ? ",1" : "1");
  wide += "]";
  EXPECT_REFUSED(serialization::model_from_config(sequential_config_with_input_shape(wide)),
                 "expected an integer");
  // ... and the CLI's.
  TempDir dir;
  const std::string path =
      dir.file("big.json", R"({"layers":[{"type":"Dense","units":")" + big + R"("}]})");
  EXPECT_REFUSED(cli::model_from_config(path, Shape{1, 8, 8}), "bad value for \"units\"");
}

TEST(HostileJson, MalformedJsonMessageQuotesAtMost200Characters) {
  // nlohmann's parse error quotes the last token read: here a 1 MB string that never ends.
  const std::string text = R"({"class_name":")" + std::string(1000000, 'y');
  EXPECT_REFUSED(serialization::model_from_config(text), "malformed config");
}

// A functional model that is one long chain: layer i consumes layer i-1, listed in reverse order
// (the worst case for replaying the calls), with cheap layers so that building it is quick.
std::string functional_chain(int n) {
  std::string s = R"({"class_name":"Functional","config":{"name":"chain","layers":[)";
  for (int i = n; i >= 1; --i) {
    s += R"({"class_name":"ReLU","name":"r)" + std::to_string(i) + R"(","config":{},"inbound_nodes":[[[")" +
         (i == 1 ? std::string("in") : "r" + std::to_string(i - 1)) + R"(",0,0]]]},)";
  }
  s += R"({"class_name":"InputLayer","name":"in","config":{"batch_shape":[-1,1],"name":"in"},"inbound_nodes":[]}],)";
  s += R"("input_layers":[["in",0,0]],"output_layers":[["r)" + std::to_string(n) + R"(",0,0]]}})";
  return s;
}

TEST(HostileJson, FunctionalChainOf1e5LayersIsRefusedQuickly) {
  // Used to take minutes (the calls were replayed in quadratic time) before overflowing the stack
  // in the model's recursive graph walk.
  const std::string text = functional_chain(100000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_REFUSED_IN_CHILD(serialization::model_from_config(text),
                          "the config lists 100001 layers, more than the limit of 10000");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(HostileJson, FunctionalChainListedInReverseOrderLoads) {
  // Each layer waits for the one listed after it: the replay must still be linear.
  auto m = serialization::model_from_config(functional_chain(1000));
  EXPECT_EQ(m->named_children().size(), 1000u);
  EXPECT_EQ(m->predict_on_batch(fill({2, 1}, -1.0)).shape(), (Shape{2, 1}));
}

TEST(HostileJson, ModelBuiltAsALongChainIsBuiltAndFreedWithoutRecursion) {
  // 100000 nested destructor calls (or graph-walk frames) would overflow an 8 MB stack.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto x = nn::Input({1});
        nn::SymbolicTensor y = x;
        nn::ModuleRef relu = nn::ReLU();
        for (int i = 0; i < 100000; ++i) y = nn::call(relu, y);  // one layer, called 1e5 times
        { nn::Model m(x, y); }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- 2. sizes from files ------------------------------------------------------------------------
const char* kDense1e12 =
    R"({"class_name":"Sequential","config":{"name":"s","input_shape":[-1,1000000],"layers":[)"
    R"({"class_name":"Dense","config":{"name":"d","units":1000000,"activation":"linear","use_bias":true,)"
    R"("kernel_initializer":{"class_name":"zeros"},"bias_initializer":{"class_name":"zeros"},)"
    R"("kernel_regularizer":null,"bias_regularizer":null,"dtype":"f32"}}]}})";

TEST(HostileSizes, ModelConfigDenseOf1e12ParametersIsRefusedBeforeAllocating) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_REFUSED(serialization::model_from_config(kDense1e12),
                 "weight 'kernel' of shape [1000000, 1000000] would have 1000000000000 elements; the "
                 "limit for a tensor described by a file is 2147483648");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(HostileSizes, ModelFileDenseOf1e12ParametersIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file(
      "huge.soma", model_file_with_header(R"({"format":"soma-model","model":)" + std::string(kDense1e12) +
                                          R"(,"weights":[],"compile":null})"));
  EXPECT_REFUSED(load_model(path), "layer 'd' from '" + path + "': weight 'kernel' of shape [1000000, 1000000]");
}

TEST(HostileSizes, CliConfigDenseOf1e12ParametersIsRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file("huge.json", R"({"layers":[{"type":"Flatten"},{"type":"Dense","units":1000000}]})");
  EXPECT_REFUSED(cli::model_from_config(path, Shape{1000, 1000}),
                 "from " + path + ": weight 'kernel' of shape [1000000, 1000000] would have 1000000000000 elements");
}

TEST(HostileSizes, ModestLayersFromAConfigStillBuild) {
  // 8e6 parameters: the check refuses absurd sizes only.
  const std::string cfg = R"({"class_name":"Sequential","config":{"name":"s","input_shape":[-1,8],"layers":[)"
                          R"({"class_name":"Dense","config":{"name":"d","units":1000000,"activation":"linear","use_bias":true,)"
                          R"("kernel_initializer":{"class_name":"zeros"},"bias_initializer":{"class_name":"zeros"},)"
                          R"("kernel_regularizer":null,"bias_regularizer":null,"dtype":"f32"}}]}})";
  EXPECT_NO_THROW(serialization::model_from_config(cfg));
}

TEST(HostileSizes, FunctionalInputOf1e12ElementsIsRefusedBeforeBuilding) {
  const std::string text =
      R"({"class_name":"Functional","config":{"name":"f","layers":[)"
      R"({"class_name":"InputLayer","name":"in","config":{"batch_shape":[-1,1000000,1000000],"name":"in"},"inbound_nodes":[]},)"
      R"({"class_name":"ReLU","name":"r","config":{},"inbound_nodes":[[["in",0,0]]]}],)"
      R"("input_layers":[["in",0,0]],"output_layers":[["r",0,0]]}})";
  EXPECT_REFUSED(serialization::model_from_config(text),
                 "input 'in': a sample of shape [1000000, 1000000] has more than 2147483648 elements");
}

std::string be32(std::uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

std::string idx_file(std::uint8_t type, const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string b = {0, 0, char(type), char(dims.size())};
  for (auto d : dims) b += be32(d);
  return b + data;
}

TEST(HostileSizes, IdxLabelOf3000000IsRefusedBeforeSizingTheOutputLayer) {
  TempDir dir;
  dir.file("train-images-idx3-ubyte", idx_file(0x08, {3, 2, 2}, std::string(12, '\1')));
  dir.file("t10k-images-idx3-ubyte", idx_file(0x08, {1, 2, 2}, std::string(4, '\1')));
  dir.file("train-labels-idx1-ubyte", idx_file(0x0C, {3}, be32(1) + be32(3000000) + be32(2)));
  dir.file("t10k-labels-idx1-ubyte", idx_file(0x0C, {1}, be32(0)));
  EXPECT_REFUSED(cli::load_dataset("idx:" + dir.str()),
                 "train label 3000000 at row 1 would size the output layer to 3000001 classes (limit 65536)");
}

TEST(HostileSizes, IdxNegativeLabelIsRefused) {
  TempDir dir;
  dir.file("train-images-idx3-ubyte", idx_file(0x08, {2, 2, 2}, std::string(8, '\1')));
  dir.file("t10k-images-idx3-ubyte", idx_file(0x08, {1, 2, 2}, std::string(4, '\1')));
  dir.file("train-labels-idx1-ubyte", idx_file(0x0C, {2}, be32(1) + be32(2)));
  dir.file("t10k-labels-idx1-ubyte", idx_file(0x0C, {1}, be32(std::uint32_t(-5))));
  EXPECT_REFUSED(cli::load_dataset("idx:" + dir.str()), "test label -5 at row 0 is not a class id");
}

TEST(HostileSizes, IdxHeaderClaimingHugeDimsIsRefusedFromTheFileSize) {
  TempDir dir;
  const std::string path = dir.file("huge.idx", idx_file(0x0D, {65535, 65535, 65535}, std::string(64, '\0')));
  EXPECT_REFUSED(data::read_idx(path), "claims shape [65535, 65535, 65535]");
}

// A zlib stream of `n` zero bytes in ~n/160 bytes: one fixed-Huffman deflate block of a literal 0
// and then length-258 copies at distance 1 (what a decompression bomb is made of).
std::string zlib_zeros(std::uint64_t n) {
  std::string out = "\x78\x01";
  std::uint64_t acc = 0;
  int bits = 0;
  auto emit = [&](std::uint32_t v, int nbits) {  // LSB-first
    acc |= std::uint64_t(v) << bits;
    bits += nbits;
    while (bits >= 8) {
      out += char(acc & 0xFF);
      acc >>= 8;
      bits -= 8;
    }
  };
  auto huff = [&](std::uint32_t code, int len) {  // Huffman codes go MSB-first
    std::uint32_t r = 0;
    for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
    emit(r, len);
  };
  emit(1, 1);  // BFINAL
  emit(1, 2);  // fixed Huffman
  std::uint64_t left = n;
  huff(0x30, 8);  // literal 0
  --left;
  for (; left >= 258; left -= 258) {
    huff(0xC5, 8);  // length 258 (symbol 285)
    huff(0, 5);     // distance 1
  }
  for (; left > 0; --left) huff(0x30, 8);
  huff(0, 7);  // end of block
  if (bits) emit(0, 8 - bits);
  const std::uint32_t adler = std::uint32_t((n % 65521) << 16) | 1u;
  return out + be32(adler);
}

std::string png_chunk(const std::string& type, const std::string& data) {
  std::string body = type + data;
  const auto crc = std::uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())));
  return be32(std::uint32_t(data.size())) + body + be32(crc);
}

TEST(HostilePng, DecompressionBombOf2To28PixelsIsRefusedFromTheHeader) {
  // 16384 x 16384 RGB: 805 MB of pixels in a ~5 MB file.
  const std::uint32_t side = 16384;
  std::string ihdr = be32(side) + be32(side) + std::string("\x08\x02\x00\x00\x00", 5);
  std::string png = "\x89PNG\r\n\x1a\n";
  png += png_chunk("IHDR", ihdr);
  png += png_chunk("IDAT", zlib_zeros(std::uint64_t(side) * (1 + 3 * std::uint64_t(side))));
  png += png_chunk("IEND", "");
  const std::vector<std::uint8_t> bytes(png.begin(), png.end());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_REFUSED(image::decode_png(bytes),
                 "image of 16384 x 16384 pixels x 3 channels would decode to 805306368 bytes, more than "
                 "the 268435456-byte limit for a decoded image");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// ---- CSV --------------------------------------------------------------------------------------
TEST(HostileCsv, RowWithAbsurdlyManyColumnsIsRefused) {
  TempDir dir;
  std::string header = "a";
  for (int i = 0; i < 2000000; ++i) header += ",a";
  const std::string path = dir.file("wide.csv", header + "\n1\n");
  EXPECT_REFUSED(data::read_csv(path, {.label_column = "label"}), "line 1 has more than 1048576 columns");
}

TEST(HostileCsv, ErrorMessagesQuoteAtMost200CharactersOfACell) {
  TempDir dir;
  const std::string path = dir.file("cell.csv", "a,b\n1," + std::string(1000000, 'z') + "\n");
  EXPECT_REFUSED(data::read_csv(path), "is not a number");
  std::string header = "c0";
  for (int i = 1; i < 10000; ++i) header += ",c" + std::to_string(i);
  const std::string named = dir.file("named.csv", header + "\n");
  EXPECT_REFUSED(data::read_csv(named, {.label_column = "label"}), "has no column named 'label'");
}

// ---- ONNX (protobuf) ----------------------------------------------------------------------------
// A protobuf message nested `levels` deep: ModelProto.graph -> GraphProto.node -> NodeProto.attribute
// -> AttributeProto.g -> GraphProto.node -> ...
std::string nested_onnx(int levels) {
  const int fields[3] = {1, 5, 6};  // GraphProto.node, NodeProto.attribute, AttributeProto.g
  auto varint = [](std::uint64_t v) {
    std::string s;
    do {
      char b = char(v & 0x7F);
      v >>= 7;
      if (v) b = char(b | 0x80);
      s += b;
    } while (v);
    return s;
  };
  std::string msg;
  for (int i = 3 * levels - 1; i >= 0; --i) {
    const int field = fields[i % 3];
    msg = std::string(1, char((field << 3) | 2)) + varint(msg.size()) + msg;
    if (msg.size() > (64u << 20)) break;
  }
  return std::string(1, char((7 << 3) | 2)) + varint(msg.size()) + msg;  // ModelProto.graph
}

TEST(HostileOnnx, DeeplyNestedProtobufIsRefusedByTheRecursionLimit) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX support";
  const std::string bytes = nested_onnx(2000);  // 6000 message levels (protobuf stops at 100)
  EXPECT_REFUSED_IN_CHILD(onnx::load_from_bytes(bytes), "protobuf parse failed");
}

TEST(HostileOnnx, InitializerDeclaring1e12ElementsWithoutDataIsRefusedBeforeAllocating) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX support";
  // ModelProto{ir_version 8, opset 13, graph{initializer{dims 1000000, dims 1000000, data_type FLOAT, name "w"}}}
  auto varint = [](std::uint64_t v) {
    std::string out;
    do {
      char b = char(v & 0x7F);
      v >>= 7;
      out += v ? char(b | 0x80) : b;
    } while (v);
    return out;
  };
  auto field = [&](int number, const std::string& bytes) { return char((number << 3) | 2) + varint(bytes.size()) + bytes; };
  const std::string tensor = char(1 << 3) + varint(1000000) + char(1 << 3) + varint(1000000) + char(2 << 3) +
                             varint(1) + field(8, "w");
  const std::string opset = field(8, char(2 << 3) + varint(13));  // opset_import {version 13}
  const std::string model = char(1 << 3) + varint(8) + opset + field(7, field(5, tensor));
  EXPECT_REFUSED(onnx::load_from_bytes(model),
                 "initializer 'w': shape [1000000, 1000000] has more than 2147483648 elements");
}

}  // namespace
