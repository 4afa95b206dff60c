// CIFAR-10 binary version reader.
#include "soma/data/cifar.hpp"

#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include "data/input_file.hpp"
#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::data {

namespace {

using detail::bytes_str;

constexpr std::int64_t kPixels = 3 * 32 * 32;
constexpr std::int64_t kRecord = 1 + kPixels;
// A batch file of the binary version holds 10,000 records (30.7 MB); refuse anything far larger
// rather than reading it all into memory.
constexpr std::uint64_t kMaxBatchBytes = std::uint64_t(1) << 32;

}  // namespace

Cifar10Batch read_cifar10_batch(const std::string& path) {
  const char* op = "read_cifar10_batch";
  detail::InputFile file(path, op);
  const char* layout = "a CIFAR-10 binary batch is a sequence of 3073-byte records (1 label byte, "
                       "3072 pixel bytes)";
  if (!file.is_gzip() && file.size_on_disk() % kRecord != 0)
    fail(op, "'", path, "' holds ", bytes_str(file.size_on_disk()),
         ", not a multiple of 3073: ", layout);
  std::vector<std::uint8_t> bytes = file.read_all(kMaxBatchBytes);
  if (bytes.size() % kRecord != 0)
    fail(op, "'", path, "' holds ", bytes_str(bytes.size()), " (uncompressed), not a multiple of 3073: ",
         layout);
  if (bytes.empty()) fail(op, "'", path, "' is empty: ", layout);

  const std::int64_t n = std::int64_t(bytes.size()) / kRecord;
  Cifar10Batch b{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::u8)};
  std::uint8_t* x = b.x.data<std::uint8_t>();
  std::uint8_t* y = b.y.data<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t* rec = bytes.data() + i * kRecord;
    if (rec[0] > 9)
      fail(op, "'", path, "' record ", i, " has label ", int(rec[0]),
           ", expected 0..9 (CIFAR-100 files, with two label bytes per record, are not CIFAR-10)");
    y[i] = rec[0];
    std::memcpy(x + i * kPixels, rec + 1, kPixels);
  }
  return b;
}

TrainTestData load_cifar10(const std::string& dir, bool channels_last) {
  namespace fs = std::filesystem;
  const std::vector<std::string> train_names = {"data_batch_1.bin", "data_batch_2.bin",
                                                "data_batch_3.bin", "data_batch_4.bin",
                                                "data_batch_5.bin"};
  const std::string test_name = "test_batch.bin";
  // The archive unpacks into cifar-10-batches-bin/; accept the directory above it too.
  fs::path base = dir;
  std::error_code ec;
  if (!fs::exists(base / test_name, ec) && fs::is_directory(base / "cifar-10-batches-bin", ec))
    base /= "cifar-10-batches-bin";

  std::vector<std::string> all = train_names;
  all.push_back(test_name);
  std::vector<std::string> missing;
  for (const auto& name : all)
    if (!fs::is_regular_file(base / name, ec)) missing.push_back(name);
  if (!missing.empty()) {
    std::ostringstream os;
    for (std::size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    fail("load_cifar10", "'", base.string(), "' lacks ", os.str(),
         ". Download the \"CIFAR-10 binary version\" (cifar-10-binary.tar.gz) from the CIFAR-10 "
         "web site and unpack it into '", dir, "' (data_batch_1.bin .. data_batch_5.bin and "
         "test_batch.bin, directly or in cifar-10-batches-bin/).");
  }

  std::vector<Tensor> xs, ys;
  for (const auto& name : train_names) {
    Cifar10Batch b = read_cifar10_batch((base / name).string());
    xs.push_back(b.x);
    ys.push_back(b.y);
  }
  Cifar10Batch test = read_cifar10_batch((base / test_name).string());
  Tensor x_train = concat(xs, 0), x_test = test.x;
  if (channels_last) {
    x_train = contiguous(transpose(x_train, {0, 2, 3, 1}));
    x_test = contiguous(transpose(x_test, {0, 2, 3, 1}));
  }
  return {x_train, concat(ys, 0), x_test, test.y};
}

}  // namespace soma::data
