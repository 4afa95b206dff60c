// IDX reader (MNIST, Fashion-MNIST, EMNIST) and the MNIST-style loaders.
#include "soma/data/idx.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <sstream>
#include <vector>

#include "data/input_file.hpp"
#include "soma/error.hpp"
#include "soma/input_limits.hpp"

namespace soma::data {

namespace {

using detail::bytes_str;
using detail::InputFile;

struct IdxType {
  const char* name;     // as the IDX documentation names it
  std::size_t size;     // bytes per element in the file
  DType dtype;          // what it loads as
};

bool idx_type(std::uint8_t code, IdxType& out) {
  switch (code) {
    case 0x08: out = {"u8", 1, DType::u8}; return true;
    case 0x09: out = {"i8", 1, DType::i32}; return true;
    case 0x0B: out = {"i16", 2, DType::i32}; return true;
    case 0x0C: out = {"i32", 4, DType::i32}; return true;
    case 0x0D: out = {"f32", 4, DType::f32}; return true;
    case 0x0E: out = {"f64", 8, DType::f64}; return true;
    default: return false;
  }
}

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

std::string hex_bytes(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Swaps each `width`-byte element of [p, p + n*width) from big-endian to the host's order.
void from_big_endian(unsigned char* p, std::size_t n, std::size_t width) {
  if constexpr (std::endian::native == std::endian::big) return;
  for (std::size_t i = 0; i < n; ++i, p += width) std::reverse(p, p + width);
}

// Product of the dimensions times the element size, saturating instead of overflowing.
std::uint64_t claimed_bytes(const Shape& shape, std::size_t elem) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t total = elem;
  for (auto d : shape) {
    if (d == 0) return 0;
    if (total > kMax / std::uint64_t(d)) return kMax;
    total *= std::uint64_t(d);
  }
  return total;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const char* op = "read_idx";
  InputFile file(path, op);

  unsigned char magic[4];
  std::size_t got = file.read(magic, 4);
  if (got < 4)
    fail(op, "'", path, "' is not an IDX file: it holds only ", bytes_str(got),
         ", fewer than the 4-byte magic number");
  IdxType type;
  if (magic[0] != 0 || magic[1] != 0 || !idx_type(magic[2], type) || magic[3] < 1 ||
      magic[3] > 8) {
    std::string why = magic[0] != 0 || magic[1] != 0 ? "the first two bytes must be 00 00"
                      : !idx_type(magic[2], type)
                          ? "element type code " + hex_bytes(magic + 2, 1) +
                                " is not one of 08 (u8), 09 (i8), 0b (i16), 0c (i32), 0d (f32), "
                                "0e (f64)"
                          : "rank " + std::to_string(magic[3]) + " is not in 1..8";
    fail(op, "'", path, "' is not an IDX file: magic number ", hex_bytes(magic, 4),
         " (expected 00 00 <type> <rank>): ", why);
  }

  const std::size_t rank = magic[3];
  unsigned char dims[4 * 8];
  got = file.read(dims, 4 * rank);
  if (got < 4 * rank)
    fail(op, "'", path, "' is truncated: its header needs ", 4 + 4 * rank,
         " bytes for rank ", rank, ", the file holds ", 4 + got);
  Shape shape(rank);
  for (std::size_t i = 0; i < rank; ++i) shape[i] = std::int64_t(be32(dims + 4 * i));

  // Refuse before allocating: a corrupted header must not turn into a huge allocation.
  const std::uint64_t header = 4 + 4 * rank;
  const std::uint64_t need = claimed_bytes(shape, type.size);
  const std::uint64_t room = file.max_remaining();
  if (need > room) {
    std::string claim = need == std::numeric_limits<std::uint64_t>::max()
                            ? std::string("more than 2^64 bytes")
                            : bytes_str(need);
    if (file.is_gzip())
      fail(op, "'", path, "' claims shape ", shape_str(shape), " of ", type.name, " (", claim,
           " of data), more than a gzip file of ", bytes_str(file.size_on_disk()),
           " can hold (at most ", bytes_str(room), "): the header is corrupted");
    fail(op, "'", path, "' claims shape ", shape_str(shape), " of ", type.name, " (", claim,
         " of data) but only ", bytes_str(room), " follow the ", header,
         "-byte header: the file is truncated or its header is corrupted");
  }

  if (need / type.size > std::uint64_t(limits::kMaxElementsFromFile))
    fail(op, "'", path, "' claims shape ", shape_str(shape), ": ", need / type.size,
         " elements, more than the ", limits::kMaxElementsFromFile,
         " (2^31) allowed for a tensor read from a file");
  const std::size_t n = std::size_t(numel(shape));
  Tensor out = Tensor::empty(shape, type.dtype);
  // Elements that load at their own width go straight into the tensor; i8 and i16 widen.
  const bool direct = type.size == dtype_size(type.dtype);
  std::vector<unsigned char> staging;
  unsigned char* dst = static_cast<unsigned char*>(out.raw_data());
  if (!direct) {
    staging.resize(std::size_t(need));
    dst = staging.data();
  }
  got = file.read(dst, std::size_t(need));
  if (got < need)
    fail(op, "'", path, "' is truncated: shape ", shape_str(shape), " of ", type.name, " needs ",
         bytes_str(need), " of data after the ", header, "-byte header, found ", bytes_str(got));
  if (!file.at_end())
    fail(op, "'", path, "' has bytes left after the ", bytes_str(need), " of data that its shape ",
         shape_str(shape), " of ", type.name, " needs: not an IDX file, or a corrupted one");

  if (type.size > 1) from_big_endian(dst, n, type.size);
  if (!direct) {
    auto* o = out.data<std::int32_t>();
    if (type.size == 1) {
      for (std::size_t i = 0; i < n; ++i) o[i] = std::int8_t(staging[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        std::int16_t v;
        std::memcpy(&v, staging.data() + 2 * i, 2);
        o[i] = v;
      }
    }
  }
  return out;
}

namespace {

const char* const kMnistFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

// Loads the four MNIST-layout files from `dir`; `what` and `hint` shape the error messages.
TrainTestData load_mnist_layout(const std::string& dir, const char* op, const char* what,
                                const std::string& hint) {
  namespace fs = std::filesystem;
  std::string found[4];
  std::vector<std::string> missing;
  for (int i = 0; i < 4; ++i) {
    for (const char* suffix : {"", ".gz"}) {
      fs::path p = fs::path(dir) / (std::string(kMnistFiles[i]) + suffix);
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        found[i] = p.string();
        break;
      }
    }
    if (found[i].empty()) missing.push_back(std::string(kMnistFiles[i]) + "[.gz]");
  }
  if (!missing.empty()) {
    std::ostringstream os;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      os << "directory '" << dir << "' does not exist";
    } else {
      os << "'" << dir << "' lacks ";
      for (std::size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    }
    fail(op, os.str(), ". It should hold the ", what,
         " IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
         "t10k-labels-idx1-ubyte (each raw, or gzip-compressed with a .gz suffix)", hint);
  }

  // The training images dominate; the other three files load alongside them.
  auto y_train = std::async(std::launch::async, read_idx, found[1]);
  auto x_test = std::async(std::launch::async, read_idx, found[2]);
  auto y_test = std::async(std::launch::async, read_idx, found[3]);
  TrainTestData d;
  d.x_train = read_idx(found[0]);
  d.y_train = y_train.get();
  d.x_test = x_test.get();
  d.y_test = y_test.get();

  auto check = [&](const Tensor& x, const Tensor& y, const std::string& xf, const std::string& yf) {
    if (x.dtype() != DType::u8 || x.rank() != 3)
      fail(op, "'", xf, "' holds ", dtype_name(x.dtype()), " ", shape_str(x.shape()),
           ", expected u8 images of shape [N, height, width]");
    if (y.dtype() != DType::u8 || y.rank() != 1)
      fail(op, "'", yf, "' holds ", dtype_name(y.dtype()), " ", shape_str(y.shape()),
           ", expected u8 labels of shape [N]");
    if (x.dim(0) != y.dim(0))
      fail(op, "label count mismatch: '", xf, "' holds ", x.dim(0), " images but '", yf,
           "' holds ", y.dim(0), " labels");
    const std::uint8_t* p = y.data<std::uint8_t>();
    for (std::int64_t i = 0; i < y.dim(0); ++i)
      if (p[i] > 9)
        fail(op, "'", yf, "' holds label ", int(p[i]), " at index ", i, ", expected 0..9");
  };
  check(d.x_train, d.y_train, found[0], found[1]);
  check(d.x_test, d.y_test, found[2], found[3]);
  return d;
}

}  // namespace

TrainTestData load_mnist(const std::string& dir) {
  return load_mnist_layout(dir, "load_mnist", "MNIST",
                           "; the MNIST database's web site publishes them.");
}

TrainTestData load_fashion_mnist(const std::string& dir) {
  const std::string hint =
      dir == kFashionMnistDir
          ? std::string("; `apt-get install dataset-fashion-mnist` installs them there "
                        "(scripts/install-deps.sh does it).")
          : "; Debian's package `dataset-fashion-mnist` installs them in " +
                std::string(kFashionMnistDir) + ", the default directory.";
  return load_mnist_layout(dir, "load_fashion_mnist", "Fashion-MNIST", hint);
}

}  // namespace soma::data
