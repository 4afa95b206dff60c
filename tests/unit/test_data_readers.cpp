// The data-set readers: IDX (raw and gzip, every element type), MNIST/Fashion-MNIST loading,
// CIFAR-10 binary batches and numeric CSV. Every fixture is written by the test itself; corrupted
// inputs must give a soma::Error naming the file and what was wrong, never a crash.
#include <zlib.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>

#include "soma/data/readers.hpp"
#include "test_support.hpp"

using namespace soma;
using namespace soma::data;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a soma::Error: ") + e.what();
  }
  return "";
}
#define EXPECT_CONTAINS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: '" << (msg) << "' lacks '" << (part) << "'"

// A fresh directory per test, removed afterwards.
class DataReaders : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("soma_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write(const std::string& name, const Bytes& bytes) const {
    std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
  }
  std::string write(const std::string& name, const std::string& text) const {
    return write(name, Bytes(text.begin(), text.end()));
  }
  // gzip-compressed with zlib itself, as gzip(1) would write it.
  std::string write_gz(const std::string& name, const Bytes& bytes) const {
    std::string p = path(name);
    gzFile g = gzopen(p.c_str(), "wb");
    EXPECT_NE(g, nullptr);
    if (!bytes.empty()) EXPECT_EQ(gzwrite(g, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    EXPECT_EQ(gzclose(g), Z_OK);
    return p;
  }

  fs::path dir_;
};

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
}

// An IDX header: 00 00 type rank, then the dimensions big-endian.
Bytes idx_header(std::uint8_t type, const std::vector<std::uint32_t>& dims) {
  Bytes b = {0, 0, type, std::uint8_t(dims.size())};
  for (auto d : dims) put_be32(b, d);
  return b;
}

// Appends the big-endian bytes of each value (written out plainly, independent of the reader).
template <class T>
void put_be(Bytes& b, const std::vector<T>& values) {
  for (T v : values) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    if constexpr (std::endian::native == std::endian::little)
      for (int i = int(sizeof(T)) - 1; i >= 0; --i) b.push_back(raw[i]);
    else
      for (std::size_t i = 0; i < sizeof(T); ++i) b.push_back(raw[i]);
  }
}

template <class T>
Bytes idx_file(std::uint8_t type, const std::vector<std::uint32_t>& dims, const std::vector<T>& values) {
  Bytes b = idx_header(type, dims);
  put_be(b, values);
  return b;
}

}  // namespace

// ---- IDX ---------------------------------------------------------------------------------------

TEST_F(DataReaders, IdxRawU8KeepsShapeDtypeAndValues) {
  auto p = write("a.idx", idx_file<std::uint8_t>(0x08, {2, 3}, {0, 1, 2, 253, 254, 255}));
  Tensor t = read_idx(p);
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{0, 1, 2, 253, 254, 255}));
}

TEST_F(DataReaders, IdxGzipIsRecognisedByMagicBytesNotByName) {
  auto p = write_gz("no_suffix.idx", idx_file<std::uint8_t>(0x08, {4}, {7, 8, 9, 10}));
  std::ifstream f(p, std::ios::binary);
  ASSERT_EQ(f.get(), 0x1f);  // really compressed
  Tensor t = read_idx(p);
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{7, 8, 9, 10}));
}

TEST_F(DataReaders, IdxI8WidensToI32KeepingTheSign) {
  auto p = write("a.idx", idx_file<std::int8_t>(0x09, {4}, {-128, -1, 0, 127}));
  Tensor t = read_idx(p);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{-128, -1, 0, 127}));
}

TEST_F(DataReaders, IdxI16IsBigEndianAndWidensToI32) {
  auto p = write("a.idx", idx_file<std::int16_t>(0x0B, {2, 2}, {-32768, -2, 0x0102, 32767}));
  Tensor t = read_idx(p);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{-32768, -2, 258, 32767}));
}

TEST_F(DataReaders, IdxI32IsBigEndian) {
  std::vector<std::int32_t> v = {std::numeric_limits<std::int32_t>::min(), -1, 0x01020304,
                                 std::numeric_limits<std::int32_t>::max()};
  Bytes b = idx_file(0x0C, {4}, v);
  EXPECT_EQ(b[4 + 4 + 4 * 2], 0x01);  // the fixture itself is big-endian
  Tensor t = read_idx(write("a.idx", b));
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_vector<std::int32_t>(), v);
}

TEST_F(DataReaders, IdxF32IsBigEndianBitExact) {
  std::vector<float> v = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), 3.14159274f,
                          std::numeric_limits<float>::denorm_min(), -1e30f};
  Tensor t = read_idx(write("a.idx", idx_file(0x0D, {3, 1, 2}, v)));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (Shape{3, 1, 2}));
  auto got = t.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(v[i])) << i;
}

TEST_F(DataReaders, IdxF64IsBigEndianBitExact) {
  std::vector<double> v = {0.1, -2.5e-300, 1e300};
  Tensor t = read_idx(write("a.idx", idx_file(0x0E, {3}, v)));
  EXPECT_EQ(t.dtype(), DType::f64);
  auto got = t.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(v[i])) << i;
}

TEST_F(DataReaders, IdxEveryTypeCodeReadsTheSameRawAndGzipped) {
  struct Case {
    std::uint8_t code;
    Bytes file;
    DType dtype;
  };
  std::vector<Case> cases = {
      {0x08, idx_file<std::uint8_t>(0x08, {3}, {1, 200, 3}), DType::u8},
      {0x09, idx_file<std::int8_t>(0x09, {3}, {1, -100, 3}), DType::i32},
      {0x0B, idx_file<std::int16_t>(0x0B, {3}, {1, -1000, 3}), DType::i32},
      {0x0C, idx_file<std::int32_t>(0x0C, {3}, {1, -100000, 3}), DType::i32},
      {0x0D, idx_file<float>(0x0D, {3}, {1, -0.25f, 3}), DType::f32},
      {0x0E, idx_file<double>(0x0E, {3}, {1, -0.125, 3}), DType::f64},
  };
  std::vector<double> second = {200, -100, -1000, -100000, -0.25, -0.125};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    Tensor raw = read_idx(write("t" + std::to_string(i), c.file));
    Tensor gz = read_idx(write_gz("t" + std::to_string(i) + ".gz", c.file));
    EXPECT_EQ(raw.dtype(), c.dtype) << int(c.code);
    EXPECT_EQ(gz.dtype(), c.dtype) << int(c.code);
    EXPECT_EQ(raw.to_vector<double>(), (std::vector<double>{1, second[i], 3})) << int(c.code);
    EXPECT_EQ(gz.to_vector<double>(), raw.to_vector<double>()) << int(c.code);
  }
}

TEST_F(DataReaders, IdxRankEightAndEmptyDimensionsAreRead) {
  Tensor t8 = read_idx(write("r8", idx_file<std::uint8_t>(0x08, {1, 2, 1, 1, 1, 1, 1, 2}, {1, 2, 3, 4})));
  EXPECT_EQ(t8.shape(), (Shape{1, 2, 1, 1, 1, 1, 1, 2}));
  Tensor empty = read_idx(write("e", idx_header(0x08, {0, 28})));
  EXPECT_EQ(empty.shape(), (Shape{0, 28}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(DataReaders, IdxBadMagicNamesFileAndBytes) {
  auto p = write("bad.idx", Bytes{0x01, 0x00, 0x08, 0x01, 0, 0, 0, 0});
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "' is not an IDX file");
  EXPECT_CONTAINS(m, "magic number 01 00 08 01");
  EXPECT_CONTAINS(m, "first two bytes must be 00 00");
}

TEST_F(DataReaders, IdxUnknownTypeCodeIsRefused) {
  auto p = write("bad.idx", Bytes{0x00, 0x00, 0x0A, 0x01, 0, 0, 0, 1, 5});
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, p);
  EXPECT_CONTAINS(m, "element type code 0a");
}

TEST_F(DataReaders, IdxRankOutsideOneToEightIsRefused) {
  auto p0 = write("r0", Bytes{0, 0, 0x08, 0, 1});
  EXPECT_CONTAINS(error_of([&] { read_idx(p0); }), "rank 0 is not in 1..8");
  Bytes b9 = {0, 0, 0x08, 9};
  for (int i = 0; i < 9; ++i) put_be32(b9, 1);
  b9.push_back(1);
  auto p9 = write("r9", b9);
  EXPECT_CONTAINS(error_of([&] { read_idx(p9); }), "rank 9 is not in 1..8");
}

TEST_F(DataReaders, IdxFileShorterThanMagicIsRefused) {
  auto p = write("short", Bytes{0, 0});
  EXPECT_CONTAINS(error_of([&] { read_idx(p); }), "holds only 2 bytes, fewer than the 4-byte magic");
  auto e = write("empty", Bytes{});
  EXPECT_CONTAINS(error_of([&] { read_idx(e); }), "holds only 0 bytes");
}

TEST_F(DataReaders, IdxTruncatedHeaderIsRefused) {
  Bytes b = {0, 0, 0x08, 3};
  put_be32(b, 10);
  put_be32(b, 28);  // the third dimension is missing
  auto p = write("hdr", b);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, p);
  EXPECT_CONTAINS(m, "header needs 16 bytes for rank 3, the file holds 12");
}

TEST_F(DataReaders, IdxTruncatedRawDataNamesExpectedAndActualBytes) {
  Bytes b = idx_file<std::int32_t>(0x0C, {3, 4}, std::vector<std::int32_t>(12, 7));
  b.resize(b.size() - 8);  // 40 of the 48 data bytes
  auto p = write("trunc.idx", b);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "'");
  EXPECT_CONTAINS(m, "[3, 4] of i32 (48 bytes of data)");
  EXPECT_CONTAINS(m, "only 40 bytes follow the 12-byte header");
}

TEST_F(DataReaders, IdxTruncatedGzipDataNamesExpectedAndActualBytes) {
  Bytes b = idx_file<std::int32_t>(0x0C, {3, 4}, std::vector<std::int32_t>(12, 7));
  b.resize(b.size() - 8);
  auto p = write_gz("trunc.idx.gz", b);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "' is truncated");
  EXPECT_CONTAINS(m, "needs 48 bytes of data after the 12-byte header, found 40 bytes");
}

TEST_F(DataReaders, IdxCutGzipStreamIsAnErrorNotACrash) {
  Bytes data = idx_header(0x08, {64, 64});
  for (int i = 0; i < 64 * 64; ++i) data.push_back(std::uint8_t((i * 2654435761u) >> 13));
  auto full = write_gz("full.gz", data);
  std::ifstream f(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  auto p = write("cut.gz", gz);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "'");
}

TEST_F(DataReaders, IdxCorruptedGzipStreamIsAnErrorNotACrash) {
  Bytes data = idx_header(0x08, {64, 64});
  for (int i = 0; i < 64 * 64; ++i) data.push_back(std::uint8_t((i * 2654435761u) >> 13));
  auto full = write_gz("full.gz", data);
  std::ifstream f(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Flip bits through the compressed body (past the 10-byte gzip header): whatever deflate
  // makes of it, the length or the CRC check must catch it.
  for (std::size_t i = 12; i + 8 < gz.size(); i += 37) gz[i] ^= 0x5a;
  auto p = write("bad.gz", gz);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "'");
}

TEST_F(DataReaders, IdxHugeClaimedShapeIsRefusedBeforeAllocating) {
  // [2^31, 2^31] u8 is 4 EiB: the reader must refuse it from the header alone. An attempted
  // allocation would fail differently ("allocate"/"too large to allocate") or not at all.
  auto p = write("huge.idx", idx_header(0x08, {0x80000000u, 0x80000000u}));
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "read_idx: '" + p + "' claims shape [2147483648, 2147483648] of u8");
  EXPECT_CONTAINS(m, "(4611686018427387904 bytes of data) but only 0 bytes follow");
  EXPECT_EQ(m.find("allocate"), std::string::npos) << m;
}

TEST_F(DataReaders, IdxClaimBeyondWhatGzipCanHoldIsRefusedBeforeAllocating) {
  // 100 MB claimed by a gzip file of a few dozen bytes: deflate cannot expand that far.
  auto p = write_gz("huge.gz", idx_header(0x08, {100000, 1000}));
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, "claims shape [100000, 1000] of u8 (100000000 bytes of data)");
  EXPECT_CONTAINS(m, "more than a gzip file of");
  EXPECT_CONTAINS(m, "the header is corrupted");
}

TEST_F(DataReaders, IdxShapeWhoseByteCountOverflowsIsRefused) {
  auto p = write("ovf.idx", idx_header(0x0E, std::vector<std::uint32_t>(8, 0xFFFFFFFFu)));
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, p);
  EXPECT_CONTAINS(m, "of f64 (more than 2^64 bytes of data)");
}

TEST_F(DataReaders, IdxTrailingBytesAreRefused) {
  Bytes b = idx_file<std::uint8_t>(0x08, {2}, {1, 2});
  b.push_back(3);
  auto p = write("extra.idx", b);
  std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, p);
  EXPECT_CONTAINS(m, "has bytes left after the 2 bytes of data that its shape [2] of u8 needs");
}

TEST_F(DataReaders, IdxMissingFileAndDirectoryAreClearErrors) {
  std::string missing = path("nope.idx");
  std::string m = error_of([&] { read_idx(missing); });
  EXPECT_CONTAINS(m, "read_idx: cannot open '" + missing + "': No such file or directory");
  std::string d = error_of([&] { read_idx(dir_.string()); });
  EXPECT_CONTAINS(d, "it is a directory");
}

// Random damage (flipped bytes, cuts, extra bytes) to raw and gzipped files: every outcome is a
// tensor or a soma::Error. A crash or any other exception fails the test.
TEST_F(DataReaders, IdxRandomCorruptionsGiveATensorOrASomaError) {
  std::mt19937 rng(1234);
  Bytes good = idx_file<std::int16_t>(0x0B, {3, 4, 5}, std::vector<std::int16_t>(60, -3));
  int errors = 0, tensors = 0;
  for (int iter = 0; iter < 400; ++iter) {
    Bytes b = good;
    switch (rng() % 3) {
      case 0:
        for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) b[rng() % b.size()] = std::uint8_t(rng());
        break;
      case 1: b.resize(rng() % b.size()); break;
      default: b.push_back(std::uint8_t(rng())); break;
    }
    std::string p = iter % 2 ? write_gz("f.gz", b) : write("f.idx", b);
    if (iter % 4 == 3) {  // damage the compressed stream itself
      std::ifstream f(p, std::ios::binary);
      Bytes gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      f.close();
      gz[rng() % gz.size()] ^= std::uint8_t(1 + rng() % 255);
      p = write("f.gz", gz);
    }
    try {
      Tensor t = read_idx(p);
      ++tensors;
      EXPECT_LE(t.numel(), 60 * 2);
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 200);
  EXPECT_GT(tensors, 0);  // some damage (a flipped data byte) leaves a valid file
}

// ---- MNIST layout ------------------------------------------------------------------------------

namespace {
Bytes images(std::uint32_t n, std::uint8_t seed) {
  Bytes b = idx_header(0x08, {n, 28, 28});
  for (std::uint32_t i = 0; i < n * 28 * 28; ++i) b.push_back(std::uint8_t(i * 31 + seed));
  return b;
}
Bytes labels(const std::vector<std::uint8_t>& v) {
  return idx_file<std::uint8_t>(0x08, {std::uint32_t(v.size())}, v);
}
}  // namespace

TEST_F(DataReaders, LoadMnistReadsTheFourFilesRawOrGzipped) {
  write_gz("train-images-idx3-ubyte.gz", images(5, 1));
  write("train-labels-idx1-ubyte", labels({5, 0, 4, 1, 9}));
  write("t10k-images-idx3-ubyte", images(3, 2));
  write_gz("t10k-labels-idx1-ubyte.gz", labels({7, 2, 1}));
  auto [x_train, y_train, x_test, y_test] = load_mnist(dir_.string());
  EXPECT_EQ(x_train.shape(), (Shape{5, 28, 28}));
  EXPECT_EQ(x_train.dtype(), DType::u8);
  EXPECT_EQ(y_train.dtype(), DType::u8);
  EXPECT_EQ(y_train.to_vector<int>(), (std::vector<int>{5, 0, 4, 1, 9}));
  EXPECT_EQ(x_test.shape(), (Shape{3, 28, 28}));
  EXPECT_EQ(y_test.to_vector<int>(), (std::vector<int>{7, 2, 1}));
  EXPECT_EQ(x_test.at<int>({0, 0, 1}), 33);  // 1 * 31 + 2
}

TEST_F(DataReaders, LoadMnistListsOnlyTheMissingFiles) {
  write("train-images-idx3-ubyte", images(1, 0));
  write("train-labels-idx1-ubyte", labels({1}));
  write("t10k-images-idx3-ubyte", images(1, 0));
  std::string m = error_of([&] { load_mnist(dir_.string()); });
  EXPECT_CONTAINS(m, "load_mnist: '" + dir_.string() + "' lacks t10k-labels-idx1-ubyte[.gz].");
  EXPECT_EQ(m.find("lacks train-images"), std::string::npos) << m;
  EXPECT_CONTAINS(m, "It should hold the MNIST IDX files");
}

TEST_F(DataReaders, LoadFashionMnistFromAMissingDirectorySaysWhatToInstall) {
  std::string d = path("not-there");
  std::string m = error_of([&] { load_fashion_mnist(d); });
  EXPECT_CONTAINS(m, "load_fashion_mnist: directory '" + d + "' does not exist");
  EXPECT_CONTAINS(m, "It should hold the Fashion-MNIST IDX files train-images-idx3-ubyte, "
                     "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte");
  EXPECT_CONTAINS(m, "dataset-fashion-mnist");
}

TEST_F(DataReaders, LoadMnistLabelCountMismatchIsAnError) {
  write("train-images-idx3-ubyte", images(5, 1));
  write("train-labels-idx1-ubyte", labels({1, 2, 3, 4}));
  write("t10k-images-idx3-ubyte", images(1, 0));
  write("t10k-labels-idx1-ubyte", labels({1}));
  std::string m = error_of([&] { load_mnist(dir_.string()); });
  EXPECT_CONTAINS(m, "label count mismatch");
  EXPECT_CONTAINS(m, "holds 5 images but");
  EXPECT_CONTAINS(m, "holds 4 labels");
}

TEST_F(DataReaders, LoadMnistLabelOutOfRangeIsAnError) {
  write("train-images-idx3-ubyte", images(2, 1));
  write("train-labels-idx1-ubyte", labels({1, 10}));
  write("t10k-images-idx3-ubyte", images(1, 0));
  write("t10k-labels-idx1-ubyte", labels({1}));
  EXPECT_CONTAINS(error_of([&] { load_mnist(dir_.string()); }),
                  "holds label 10 at index 1, expected 0..9");
}

TEST_F(DataReaders, LoadMnistSwappedImagesAndLabelsIsAnError) {
  write("train-images-idx3-ubyte", labels({1, 2}));
  write("train-labels-idx1-ubyte", images(2, 1));
  write("t10k-images-idx3-ubyte", images(1, 0));
  write("t10k-labels-idx1-ubyte", labels({1}));
  EXPECT_CONTAINS(error_of([&] { load_mnist(dir_.string()); }),
                  "holds u8 [2], expected u8 images of shape [N, height, width]");
}

// The real data set, when Debian's dataset-fashion-mnist package is installed.
TEST(FashionMnist, LoadsTheInstalledDataSet) {
  if (!fs::is_directory(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " is absent: apt-get install dataset-fashion-mnist";
  auto start = std::chrono::steady_clock::now();
  auto [x_train, y_train, x_test, y_test] = load_fashion_mnist();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ timing   ] load_fashion_mnist: " << ms << " ms\n";
  ::testing::Test::RecordProperty("load_ms", int(ms));

  EXPECT_EQ(x_train.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(y_train.shape(), (Shape{60000}));
  EXPECT_EQ(x_test.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(y_test.shape(), (Shape{10000}));
  EXPECT_EQ(x_train.dtype(), DType::u8);
  EXPECT_EQ(y_train.dtype(), DType::u8);
  // Pinned from the files (Python's gzip module): the first labels are 9 "Ankle boot", 0
  // "T-shirt/top", ...; every class has 6,000 training images; the pixel sums.
  auto yt = y_train.to_vector<int>();
  EXPECT_EQ(std::vector<int>(yt.begin(), yt.begin() + 8), (std::vector<int>{9, 0, 0, 3, 0, 2, 7, 2}));
  EXPECT_EQ(y_test.to_vector<int>()[0], 9);
  std::vector<int> counts(10, 0);
  for (int v : yt) {
    ASSERT_GE(v, 0);
    ASSERT_LE(v, 9);
    ++counts[v];
  }
  EXPECT_EQ(counts, std::vector<int>(10, 6000));
  auto pixel_sum = [](const Tensor& t) {
    const std::uint8_t* p = t.data<std::uint8_t>();
    std::uint64_t s = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) s += p[i];
    return s;
  };
  EXPECT_EQ(pixel_sum(x_train), 3431114169u);
  EXPECT_EQ(pixel_sum(x_test), 573469082u);
}

// ---- CIFAR-10 ----------------------------------------------------------------------------------

namespace {
std::uint8_t cifar_pixel(int record, int c, int h, int w) {
  return std::uint8_t(record * 7 + c * 100 + h * 5 + w);
}
Bytes cifar_records(const std::vector<std::uint8_t>& labels, int first = 0) {
  Bytes b;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    b.push_back(labels[i]);
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 32; ++h)
        for (int w = 0; w < 32; ++w) b.push_back(cifar_pixel(first + int(i), c, h, w));
  }
  return b;
}
}  // namespace

TEST_F(DataReaders, CifarBatchIsChannelsFirstWithLabels) {
  auto p = write("data_batch_1.bin", cifar_records({0, 9, 4}));
  Cifar10Batch b = read_cifar10_batch(p);
  EXPECT_EQ(b.x.shape(), (Shape{3, 3, 32, 32}));
  EXPECT_EQ(b.x.dtype(), DType::u8);
  EXPECT_EQ(b.y.to_vector<int>(), (std::vector<int>{0, 9, 4}));
  for (int i : {0, 2})
    for (int c : {0, 1, 2})
      for (auto [h, w] : {std::pair{0, 0}, std::pair{31, 0}, std::pair{5, 17}, std::pair{31, 31}})
        EXPECT_EQ(b.x.at<int>({i, c, h, w}), cifar_pixel(i, c, h, w)) << i << c << h << w;
}

TEST_F(DataReaders, CifarBatchMayBeGzipped) {
  Cifar10Batch b = read_cifar10_batch(write_gz("b.bin.gz", cifar_records({3, 1})));
  EXPECT_EQ(b.x.shape(), (Shape{2, 3, 32, 32}));
  EXPECT_EQ(b.y.to_vector<int>(), (std::vector<int>{3, 1}));
}

TEST_F(DataReaders, CifarSizeNotAMultipleOfTheRecordIsAnError) {
  Bytes b = cifar_records({1, 2});
  b.push_back(0);
  auto p = write("odd.bin", b);
  std::string m = error_of([&] { read_cifar10_batch(p); });
  EXPECT_CONTAINS(m, "read_cifar10_batch: '" + p + "' holds 6147 bytes, not a multiple of 3073");
  Bytes g = cifar_records({1});
  g.pop_back();
  auto pg = write_gz("odd.gz", g);
  EXPECT_CONTAINS(error_of([&] { read_cifar10_batch(pg); }), "3072 bytes (uncompressed), not a multiple of 3073");
}

TEST_F(DataReaders, CifarEmptyFileIsAnError) {
  auto p = write("empty.bin", Bytes{});
  EXPECT_CONTAINS(error_of([&] { read_cifar10_batch(p); }), "is empty");
}

TEST_F(DataReaders, CifarLabelOutsideTenClassesIsAnError) {
  auto p = write("c100.bin", cifar_records({1, 42}));
  EXPECT_CONTAINS(error_of([&] { read_cifar10_batch(p); }), "record 1 has label 42, expected 0..9");
}

TEST_F(DataReaders, LoadCifar10ConcatenatesTheFiveTrainingBatches) {
  fs::create_directories(dir_ / "cifar-10-batches-bin");
  for (int i = 1; i <= 5; ++i)
    write("cifar-10-batches-bin/data_batch_" + std::to_string(i) + ".bin",
          cifar_records({std::uint8_t(i), std::uint8_t(i - 1)}, 2 * (i - 1)));
  write("cifar-10-batches-bin/test_batch.bin", cifar_records({8}, 50));
  // The directory the archive was unpacked in works as well as cifar-10-batches-bin itself.
  for (auto d : {dir_, dir_ / "cifar-10-batches-bin"}) {
    auto [x_train, y_train, x_test, y_test] = load_cifar10(d.string());
    EXPECT_EQ(x_train.shape(), (Shape{10, 3, 32, 32}));
    EXPECT_EQ(y_train.to_vector<int>(), (std::vector<int>{1, 0, 2, 1, 3, 2, 4, 3, 5, 4}));
    EXPECT_EQ(x_train.at<int>({7, 2, 3, 4}), cifar_pixel(7, 2, 3, 4));
    EXPECT_EQ(x_test.shape(), (Shape{1, 3, 32, 32}));
    EXPECT_EQ(y_test.to_vector<int>(), (std::vector<int>{8}));
    EXPECT_EQ(x_test.at<int>({0, 1, 2, 3}), cifar_pixel(50, 1, 2, 3));
  }
  // channels_last (Keras' layout): the same pixels as [N, H, W, C].
  auto nhwc = load_cifar10(dir_.string(), /*channels_last=*/true);
  EXPECT_EQ(nhwc.x_train.shape(), (Shape{10, 32, 32, 3}));
  EXPECT_EQ(nhwc.x_train.at<int>({7, 3, 4, 2}), cifar_pixel(7, 2, 3, 4));
  EXPECT_EQ(nhwc.x_test.shape(), (Shape{1, 32, 32, 3}));
  EXPECT_EQ(nhwc.x_test.at<int>({0, 2, 3, 1}), cifar_pixel(50, 1, 2, 3));
}

TEST_F(DataReaders, LoadCifar10NamesMissingFilesAndTheDownload) {
  write("data_batch_1.bin", cifar_records({1}));
  std::string m = error_of([&] { load_cifar10(dir_.string()); });
  EXPECT_CONTAINS(m, "load_cifar10: '" + dir_.string() + "' lacks data_batch_2.bin, data_batch_3.bin");
  EXPECT_CONTAINS(m, "test_batch.bin");
  EXPECT_CONTAINS(m, "\"CIFAR-10 binary version\"");
  EXPECT_EQ(m.find("data_batch_1.bin,"), std::string::npos) << m;
}

// ---- CSV ---------------------------------------------------------------------------------------

TEST_F(DataReaders, CsvLabelColumnByName) {
  auto p = write("a.csv", "x,label,y\n1,0,2\n3.5,1,-4e2\n");
  CsvData d = read_csv(p, {.label_column = "label"});
  EXPECT_EQ(d.features.dtype(), DType::f32);
  EXPECT_EQ(d.features.shape(), (Shape{2, 2}));
  EXPECT_EQ(d.features.to_vector<float>(), (std::vector<float>{1, 2, 3.5f, -400}));
  EXPECT_EQ(d.labels.dtype(), DType::i64);
  EXPECT_EQ(d.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(d.label_name, "label");
}

TEST_F(DataReaders, CsvLabelColumnByIndexCountsFromEitherEnd) {
  auto p = write("a.csv", "a,b,c\n1,2,3\n4,5,6\n");
  EXPECT_EQ(read_csv(p, {.label_column = 0}).labels.to_vector<int>(), (std::vector<int>{1, 4}));
  CsvData last = read_csv(p, {.label_column = -1});
  EXPECT_EQ(last.labels.to_vector<int>(), (std::vector<int>{3, 6}));
  EXPECT_EQ(last.features.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(last.label_name, "c");
}

TEST_F(DataReaders, CsvWithoutLabelColumnIsAllFeatures) {
  CsvData d = read_csv(write("a.csv", "a,b\n1,2\n"));
  EXPECT_EQ(d.features.shape(), (Shape{1, 2}));
  EXPECT_FALSE(d.labels.defined());
  EXPECT_EQ(d.label_name, "");
}

TEST_F(DataReaders, CsvWithoutHeaderNamesColumnsByIndex) {
  CsvData d = read_csv(write("a.csv", "1,2,0\n3,4,1\n"), {.header = false, .label_column = 2});
  EXPECT_EQ(d.features.shape(), (Shape{2, 2}));
  EXPECT_EQ(d.labels.to_vector<int>(), (std::vector<int>{0, 1}));
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"0", "1"}));
}

TEST_F(DataReaders, CsvQuotedFieldsMayHoldDelimitersQuotesAndLineBreaks) {
  auto p = write("q.csv",
                 "\"width, cm\",\"say \"\"hi\"\"\",\"multi\nline\"\n"
                 "\"1.5\", 2 ,3\n");
  CsvData d = read_csv(p);
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"width, cm", "say \"hi\"", "multi\nline"}));
  EXPECT_EQ(d.features.to_vector<float>(), (std::vector<float>{1.5f, 2, 3}));
  // A record after a quoted line break keeps counting physical lines.
  auto bad = write("qbad.csv", "a,\"b\nc\"\n1,x\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(bad); }), "line 3, column 2 ('b\nc'): 'x' is not a number");
}

TEST_F(DataReaders, CsvCrlfLineEndings) {
  CsvData d = read_csv(write("crlf.csv", "a,\"b\"\r\n1,2\r\n3,4\r\n"), {.label_column = "b"});
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"a"}));
  EXPECT_EQ(d.features.to_vector<float>(), (std::vector<float>{1, 3}));
  EXPECT_EQ(d.labels.to_vector<int>(), (std::vector<int>{2, 4}));
}

TEST_F(DataReaders, CsvBlankLinesAndMissingFinalNewlineAreFine) {
  EXPECT_EQ(read_csv(write("a.csv", "a,b\n1,2\n3,4\n\n")).features.shape(), (Shape{2, 2}));
  EXPECT_EQ(read_csv(write("b.csv", "a,b\n1,2\n\n3,4")).features.shape(), (Shape{2, 2}));
  EXPECT_EQ(read_csv(write("c.csv", "\xEF\xBB\xBF" "a,b\r\n1,2\r\n\r\n")).feature_names,
            (std::vector<std::string>{"a", "b"}));
}

TEST_F(DataReaders, CsvHeaderOnlyGivesZeroRows) {
  CsvData d = read_csv(write("h.csv", "a,b,c\n"), {.label_column = "c"});
  EXPECT_EQ(d.features.shape(), (Shape{0, 2}));
  EXPECT_EQ(d.labels.shape(), (Shape{0}));
}

TEST_F(DataReaders, CsvOtherDelimitersAndF64) {
  CsvData d = read_csv(write("t.tsv", "a\tb\n0.1\t2\n"), {.delimiter = '\t', .dtype = DType::f64});
  EXPECT_EQ(d.features.dtype(), DType::f64);
  EXPECT_EQ(d.features.to_vector<double>(), (std::vector<double>{0.1, 2}));
  EXPECT_EQ(read_csv(write("s.csv", "a;b\n1;+2\n"), {.delimiter = ';'}).features.to_vector<float>(),
            (std::vector<float>{1, 2}));
}

TEST_F(DataReaders, CsvRaggedRowNamesItsLine) {
  auto p = write("r.csv", "a,b,c\n1,2,3\n4,5,6\n7,8\n");
  std::string m = error_of([&] { read_csv(p); });
  EXPECT_EQ(m, "read_csv: '" + p + "' line 4 has 2 fields, expected 3 like the header (line 1)");
  auto q = write("r2.csv", "1,2\n3,4,5\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(q, {.header = false}); }),
                  "line 2 has 3 fields, expected 2 like the first row (line 1)");
}

TEST_F(DataReaders, CsvNonNumericCellNamesLineAndColumn) {
  auto p = write("n.csv", "a,b\n1,2\n3,abc\n");
  EXPECT_EQ(error_of([&] { read_csv(p); }),
            "read_csv: '" + p + "' line 3, column 2 ('b'): 'abc' is not a number");
  auto e = write("e.csv", "a,b\n1,\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(e); }), "line 2, column 2 ('b'): empty cell is not a number");
  auto q = write("q.csv", "a,b\n\"1,5\",2\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(q); }), "line 2, column 1 ('a'): '1,5' is not a number");
  auto partial = write("p.csv", "a\n12x\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(partial); }), "'12x' is not a number");
}

TEST_F(DataReaders, CsvUnknownLabelColumnListsTheColumns) {
  auto p = write("a.csv", "sepal,petal\n1,2\n");
  EXPECT_EQ(error_of([&] { read_csv(p, {.label_column = "species"}); }),
            "read_csv: '" + p + "' has no column named 'species'; its columns are 'sepal', 'petal'");
  EXPECT_CONTAINS(error_of([&] { read_csv(p, {.label_column = 2}); }),
                  "label column index 2 is out of range for 2 columns");
  EXPECT_CONTAINS(error_of([&] { read_csv(p, {.header = false, .label_column = "sepal"}); }),
                  "is given by name but the file has no header");
}

TEST_F(DataReaders, CsvNonIntegerLabelNeedsAFloatingLabelDtype) {
  auto p = write("a.csv", "x,y\n1,0.5\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(p, {.label_column = "y"}); }),
                  "line 2, column 2: label 0.5 is not an integer class id representable as i64");
  CsvData d = read_csv(p, {.label_column = "y", .label_dtype = DType::f32});
  EXPECT_EQ(d.labels.to_vector<float>(), (std::vector<float>{0.5f}));
  auto big = write("b.csv", "x,y\n1,300\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(big, {.label_column = "y", .label_dtype = DType::u8}); }),
                  "label 300 is not an integer class id representable as u8");
}

TEST_F(DataReaders, CsvUnterminatedQuoteIsAnError) {
  auto p = write("u.csv", "a,b\n1,\"2\n3,4\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(p); }), "line 2: a quoted field is not closed");
  auto junk = write("j.csv", "a,b\n1,\"2\"x\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(junk); }), "unexpected character 'x' after a closing quote");
}

TEST_F(DataReaders, CsvRandomTextGivesDataOrASomaError) {
  std::mt19937 rng(99);
  const std::string alphabet = "0123456789.,\"\r\n e-+xa;";
  for (int iter = 0; iter < 400; ++iter) {
    std::string text;
    for (int k = 0, n = int(rng() % 40); k < n; ++k) text += alphabet[rng() % alphabet.size()];
    auto p = write("r.csv", text);
    try {
      CsvData d = read_csv(p, {.header = iter % 2 == 0, .label_column = iter % 3 ? CsvColumn(-1) : CsvColumn()});
      EXPECT_EQ(d.features.rank(), 2);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("read_csv"), std::string::npos) << e.what();
    }
  }
}

TEST_F(DataReaders, CsvEmptyFileAndBadOptionsAreErrors) {
  auto p = write("e.csv", "");
  EXPECT_CONTAINS(error_of([&] { read_csv(p); }), "is empty: expected a header row");
  EXPECT_CONTAINS(error_of([&] { read_csv(p, {.header = false}); }), "is empty: no rows");
  auto a = write("a.csv", "a\n1\n");
  EXPECT_CONTAINS(error_of([&] { read_csv(a, {.dtype = DType::i32}); }), "dtype i32 is not a floating type");
  EXPECT_CONTAINS(error_of([&] { read_csv(path("missing.csv")); }), "read_csv: cannot open");
}
