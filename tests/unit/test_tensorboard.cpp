// TensorBoard event files: CRC-32C and TFRecord framing, the EventFileWriter read back by an
// independent reader (tests/tools/read_tfevents.py: its own CRC and a hand-written protobuf
// wire-format decoder), and the Keras callback during a real fit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "soma/error.hpp"
#include "soma/metrics.hpp"
#include "soma/model/sequential.hpp"
#include "soma/model/tensorboard.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/ops.hpp"
#include "soma/optim/optimizers.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
namespace nn = soma::nn;
namespace tb = soma::tensorboard;
using soma::Tensor;
using soma::callbacks::TensorBoard;

namespace {

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- the independent reader -----------------------------------------------------------------

struct ReaderRun {
  int status = -1;
  std::string output;  // stdout and stderr
  std::vector<std::string> lines;
};

// Runs `PYTHON SCRIPT PATH`, collecting its output (stdout and stderr) and exit status.
ReaderRun run_python(const char* script, const std::string& path, const char* python = nullptr) {
  ReaderRun r;
#if defined(SOMA_PYTHON3)
  if (!python) python = SOMA_PYTHON3;
  std::string cmd = std::string("'") + python + "' '" + script + "' '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::istringstream is(r.output);
  for (std::string line; std::getline(is, line);)
    if (!line.empty()) r.lines.push_back(line);
#else
  (void)script, (void)path;
#endif
  return r;
}

ReaderRun run_reader(const std::string& path) {
#if defined(SOMA_TFEVENTS_READER)
  return run_python(SOMA_TFEVENTS_READER, path);
#else
  (void)path;
  return {};
#endif
}

#if defined(SOMA_PYTHON3) && defined(SOMA_TFEVENTS_READER)
#define SKIP_WITHOUT_READER() (void)0
#else
#define SKIP_WITHOUT_READER() GTEST_SKIP() << "no python3 interpreter for the independent reader"
#endif

// Field access on one JSON line as the reader prints it (json.dumps: `"key": value`).
bool has_field(const std::string& line, const std::string& key) {
  return contains(line, "\"" + key + "\": ");
}
double num_field(const std::string& line, const std::string& key) {
  auto pos = line.find("\"" + key + "\": ");
  if (pos == std::string::npos) ADD_FAILURE() << "no " << key << " in " << line;
  return pos == std::string::npos ? NAN : std::strtod(line.c_str() + pos + key.size() + 4, nullptr);
}
std::string str_field(const std::string& line, const std::string& key) {
  auto pos = line.find("\"" + key + "\": \"");
  if (pos == std::string::npos) return "";
  pos += key.size() + 5;
  return line.substr(pos, line.find('"', pos) - pos);
}
std::vector<double> list_field(const std::string& line, const std::string& key) {
  std::vector<double> out;
  auto pos = line.find("\"" + key + "\": [");
  if (pos == std::string::npos) return out;
  const char* p = line.c_str() + pos + key.size() + 5;
  while (*p && *p != ']') {
    char* end;
    out.push_back(std::strtod(p, &end));
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  return out;
}

// Summary values only (drops the file_version record), optionally those of one tag.
std::vector<std::string> values_of(const ReaderRun& r, const std::string& tag = "") {
  std::vector<std::string> out;
  for (const auto& l : r.lines)
    if (has_field(l, "tag") && (tag.empty() || str_field(l, "tag") == tag)) out.push_back(l);
  return out;
}

// A fresh directory per test, removed afterwards.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tb::available()) GTEST_SKIP() << "soma was built without protobuf";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("soma_tb_") + std::to_string(getpid()) + "_" + info->test_suite_name() +
            "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> event_files(const fs::path& d) const {
    std::vector<std::string> out;
    if (fs::exists(d))
      for (const auto& e : fs::directory_iterator(d))
        if (contains(e.path().filename().string(), "tfevents")) out.push_back(e.path().string());
    return out;
  }
  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(std::uint8_t(s[at + i])) << (8 * i);
  return v;
}

}  // namespace

// ---- CRC-32C and framing --------------------------------------------------------------------

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);
}

TEST(Crc32c, OfNothingIsZero) { EXPECT_EQ(tb::crc32c(""), 0u); }

TEST(Crc32c, OfThirtyTwoZeroBytesMatchesTheRfc3720Vector) {
  // iSCSI's test vectors (RFC 3720, B.4): 32 bytes of zeros -> 0x8A9136AA.
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(MaskCrc, RotatesRightBy15AndAddsTheConstant) {
  EXPECT_EQ(tb::mask_crc(0u), 0xA282EAD8u);
  EXPECT_EQ(tb::mask_crc(0x00008000u), 0xA282EAD9u);  // bit 15 rotates to bit 0
  EXPECT_EQ(tb::mask_crc(0x00000001u), 0xA284EAD8u);  // bit 0 rotates to bit 17
  EXPECT_EQ(tb::mask_crc(0xE3069283u), 0xC78AB0E5u);  // rotr15 = 0x2507C60D, + 0xA282EAD8
}

TEST(MaskCrc, UnmaskInvertsMask) {
  for (std::uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x5D5D1234u})
    EXPECT_EQ(tb::unmask_crc(tb::mask_crc(c)), c);
}

TEST(TfRecord, FramesLengthChecksumsAndData) {
  std::string r = tb::tfrecord("abc");
  ASSERT_EQ(r.size(), 3u + 16u);
  EXPECT_EQ(le(r, 0, 8), 3u);
  EXPECT_EQ(le(r, 8, 4), tb::mask_crc(tb::crc32c(r.substr(0, 8))));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(le(r, 15, 4), tb::mask_crc(tb::crc32c("abc")));
}

// ---- EventFileWriter ------------------------------------------------------------------------

using EventFileWriterTest = TempDir;

TEST_F(EventFileWriterTest, NamesTheFileAsTensorBoardExpects) {
  tb::EventFileWriter w(dir_.string());
  std::string name = fs::path(w.path()).filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+)")))
      << name;
  EXPECT_EQ(fs::path(w.path()).parent_path(), dir_);
  EXPECT_TRUE(fs::exists(w.path()));
}

TEST_F(EventFileWriterTest, TwoWritersInOneDirectoryGetTwoFiles) {
  tb::EventFileWriter a(dir_.string()), b(dir_.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(event_files(dir_).size(), 2u);
}

TEST_F(EventFileWriterTest, FirstRecordIsTheFileVersion) {
  SKIP_WITHOUT_READER();
  std::string path;
  {
    tb::EventFileWriter w(dir_.string());
    path = w.path();
  }
  ReaderRun r = run_reader(path);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.lines.size(), 1u) << r.output;
  EXPECT_EQ(str_field(r.lines[0], "file_version"), "brain.Event:2");
  EXPECT_GT(num_field(r.lines[0], "wall_time"), 1.6e9);  // seconds since 1970, after 2020
}

TEST_F(EventFileWriterTest, ScalarsReadBackWithTagsStepsAndValues) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_scalar("epoch_loss", 0.75, 0);
  w.add_scalar("epoch_loss", 0.5, 1);
  w.add_scalar("epoch_accuracy", 0.875, 1);
  w.add_scalar("big_step", -3.25, std::int64_t(1) << 40);
  w.close();
  ReaderRun r = run_reader(w.path());
  ASSERT_EQ(r.status, 0) << r.output;
  auto v = values_of(r);
  ASSERT_EQ(v.size(), 4u) << r.output;
  EXPECT_EQ(str_field(v[0], "tag"), "epoch_loss");
  EXPECT_EQ(num_field(v[0], "step"), 0);
  EXPECT_EQ(num_field(v[0], "simple_value"), 0.75);
  EXPECT_EQ(num_field(v[1], "step"), 1);
  EXPECT_EQ(num_field(v[1], "simple_value"), 0.5);
  EXPECT_EQ(str_field(v[2], "tag"), "epoch_accuracy");
  EXPECT_EQ(num_field(v[2], "simple_value"), 0.875);
  EXPECT_EQ(num_field(v[3], "step"), double(std::int64_t(1) << 40));
  EXPECT_EQ(num_field(v[3], "simple_value"), -3.25);
}

TEST_F(EventFileWriterTest, ScalarsAreStoredAsFloat32) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_scalar("x", 0.1, 0);
  w.close();
  auto v = values_of(run_reader(w.path()));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(num_field(v[0], "simple_value"), double(0.1f));
}

TEST_F(EventFileWriterTest, HistogramHoldsStatisticsAndEqualWidthBuckets) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  // 0..9 in 5 buckets of width 1.8: two values each; 9 (the maximum) lands in the last one.
  w.add_histogram("dense/kernel", soma::arange(0.0, 10.0).reshape({2, 5}), 3, 5);
  w.close();
  ReaderRun r = run_reader(w.path());
  ASSERT_EQ(r.status, 0) << r.output;
  auto v = values_of(r, "dense/kernel");
  ASSERT_EQ(v.size(), 1u) << r.output;
  EXPECT_EQ(num_field(v[0], "step"), 3);
  EXPECT_EQ(num_field(v[0], "min"), 0.0);
  EXPECT_EQ(num_field(v[0], "max"), 9.0);
  EXPECT_EQ(num_field(v[0], "num"), 10.0);
  EXPECT_EQ(num_field(v[0], "sum"), 45.0);
  EXPECT_EQ(num_field(v[0], "sum_squares"), 285.0);
  auto limits = list_field(v[0], "bucket_limit");
  auto counts = list_field(v[0], "bucket");
  std::vector<double> want_limits{1.8, 3.6, 5.4, 7.2, 9.0};
  ASSERT_EQ(limits.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_NEAR(limits[i], want_limits[i], 1e-12) << i;
  EXPECT_EQ(counts, (std::vector<double>{2, 2, 2, 2, 2}));
}

TEST_F(EventFileWriterTest, HistogramOfEqualValuesHasOneBucket) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_histogram("bias", soma::fill({4}, 0.5), 0);
  w.close();
  auto v = values_of(run_reader(w.path()));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(list_field(v[0], "bucket_limit"), (std::vector<double>{0.5}));
  EXPECT_EQ(list_field(v[0], "bucket"), (std::vector<double>{4}));
  EXPECT_EQ(num_field(v[0], "num"), 4.0);
}

TEST_F(EventFileWriterTest, HistogramBucketCountsSumToTheElementCount) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_histogram("w", soma::testing::rand_tensor({7, 13}, 11, -2.0, 3.0), 0);
  w.close();
  auto v = values_of(run_reader(w.path()));
  ASSERT_EQ(v.size(), 1u);
  auto counts = list_field(v[0], "bucket");
  EXPECT_EQ(counts.size(), 30u);  // the default, as tf.summary.histogram
  double total = 0;
  for (double c : counts) total += c;
  EXPECT_EQ(total, 91.0);
}

TEST_F(EventFileWriterTest, HistogramOfNonFiniteValuesThrowsNamingTheTag) {
  tb::EventFileWriter w(dir_.string());
  Tensor t = soma::constant(std::vector<double>{1.0, NAN}, {2});
  std::string msg = error_of([&] { w.add_histogram("dense/kernel", t, 0); });
  EXPECT_TRUE(contains(msg, "'dense/kernel'")) << msg;
  EXPECT_TRUE(contains(msg, "non-finite")) << msg;
}

TEST_F(EventFileWriterTest, FlushMakesRecordsReadableBeforeClose) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_scalar("epoch_loss", 1.5, 0);
  w.flush();
  ASSERT_TRUE(w.is_open());
  auto v = values_of(run_reader(w.path()));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(num_field(v[0], "simple_value"), 1.5);
}

TEST_F(EventFileWriterTest, WritingAfterCloseThrows) {
  tb::EventFileWriter w(dir_.string());
  w.close();
  EXPECT_TRUE(contains(error_of([&] { w.add_scalar("x", 1, 0); }), "closed"));
}

TEST_F(EventFileWriterTest, UnwritableDirectoryThrowsNamingIt) {
  write_bytes((dir_.parent_path() / (dir_.filename().string() + "_file")).string(), "x");
  fs::path blocked = dir_.parent_path() / (dir_.filename().string() + "_file") / "sub";
  std::string msg = error_of([&] { tb::EventFileWriter w(blocked.string()); });
  fs::remove(blocked.parent_path());
  EXPECT_TRUE(contains(msg, blocked.string())) << msg;
}

// Corruption must be caught by the reader's own CRC check: proof that it really verifies.
TEST_F(EventFileWriterTest, ReaderReportsACrcErrorForACorruptedDataByte) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.add_scalar("epoch_loss", 0.25, 7);
  w.close();
  ASSERT_EQ(run_reader(w.path()).status, 0);
  std::string bytes = read_bytes(w.path());
  std::size_t first = 12 + le(bytes, 0, 8) + 4;  // start of the second record
  bytes[first + 12 + 3] ^= 0x01;                  // a byte inside its data
  write_bytes(w.path(), bytes);
  ReaderRun r = run_reader(w.path());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "record 1: CRC mismatch in the data")) << r.output;
}

TEST_F(EventFileWriterTest, ReaderReportsACrcErrorForACorruptedLengthByte) {
  SKIP_WITHOUT_READER();
  tb::EventFileWriter w(dir_.string());
  w.close();
  std::string bytes = read_bytes(w.path());
  bytes[5] ^= 0x40;
  write_bytes(w.path(), bytes);
  ReaderRun r = run_reader(w.path());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "record 0: CRC mismatch in the length")) << r.output;
}

// ---- the TensorBoard callback ---------------------------------------------------------------

namespace {

Tensor labels(std::int64_t n, std::int64_t classes, std::uint64_t seed) {
  Tensor u = soma::testing::rand_tensor({n}, seed, 0.0, double(classes));
  std::vector<std::int64_t> v;
  for (double d : u.to_vector<double>())
    v.push_back(std::min<std::int64_t>(classes - 1, std::int64_t(d)));
  return soma::constant(v, {n});
}

nn::Sequential compiled_classifier() {
  nn::Sequential m{nn::Dense(6, nn::tanh), nn::Dense(3)};
  m.compile(soma::optim::SGD({.learning_rate = 0.1}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}),
            {soma::metrics::Accuracy()});
  return m;
}

Tensor features(std::int64_t n, std::uint64_t seed) {
  return soma::testing::rand_tensor({n, 4}, seed).cast(soma::DType::f32);
}

}  // namespace

using TensorBoardCallback = TempDir;

TEST_F(TensorBoardCallback, FitWritesOneScalarPerEpochPerMetricInTrainAndValidation) {
  SKIP_WITHOUT_READER();
  auto model = compiled_classifier();
  auto h = model.fit(features(24, 1), labels(24, 3, 2),
                     {.epochs = 3, .batch_size = 8,
                      .validation_data = {{features(8, 3), labels(8, 3, 4)}},
                      .callbacks = {TensorBoard({.log_dir = dir_.string()})}, .verbose = 0});
  auto train = event_files(dir_ / "train");
  auto val = event_files(dir_ / "validation");
  ASSERT_EQ(train.size(), 1u);
  ASSERT_EQ(val.size(), 1u);

  ReaderRun rt = run_reader(train[0]), rv = run_reader(val[0]);
  ASSERT_EQ(rt.status, 0) << rt.output;
  ASSERT_EQ(rv.status, 0) << rv.output;
  for (auto [run, prefix] : {std::pair{&rt, ""}, std::pair{&rv, "val_"}}) {
    for (std::string metric : {"loss", "accuracy"}) {
      auto v = values_of(*run, "epoch_" + metric);
      ASSERT_EQ(v.size(), 3u) << metric << "\n" << run->output;
      const auto& want = h[prefix + metric];
      for (int e = 0; e < 3; ++e) {
        EXPECT_EQ(num_field(v[e], "step"), e);
        EXPECT_EQ(num_field(v[e], "simple_value"), double(float(want[e]))) << metric << e;
      }
    }
    EXPECT_EQ(values_of(*run).size(), 6u) << run->output;  // nothing else: no histograms asked
  }
}

TEST_F(TensorBoardCallback, HistogramsOfEveryWeightUseLayerNames) {
  SKIP_WITHOUT_READER();
  nn::reset_layer_name_counters();
  auto model = compiled_classifier();
  model.fit(features(16, 5), labels(16, 3, 6),
            {.epochs = 3, .batch_size = 8,
             .callbacks = {TensorBoard({.log_dir = dir_.string(), .histogram_freq = 2})},
             .verbose = 0});
  auto train = event_files(dir_ / "train");
  ASSERT_EQ(train.size(), 1u);
  ReaderRun r = run_reader(train[0]);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* tag : {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}) {
    auto v = values_of(r, tag);
    ASSERT_EQ(v.size(), 2u) << tag << "\n" << r.output;  // epochs 0 and 2
    EXPECT_EQ(num_field(v[0], "step"), 0);
    EXPECT_EQ(num_field(v[1], "step"), 2);
  }
  // The histogram's statistics are those of the weight after the epoch (the last one here).
  auto kernel = model.named_parameters()[0].second.value().to_vector<double>();
  auto last = values_of(r, "dense/kernel").back();
  EXPECT_EQ(num_field(last, "num"), double(kernel.size()));
  EXPECT_EQ(num_field(last, "min"), *std::min_element(kernel.begin(), kernel.end()));
  EXPECT_EQ(num_field(last, "max"), *std::max_element(kernel.begin(), kernel.end()));
}

// TensorBoard itself (PyPI's tensorboard, its EventAccumulator) reads the run: scalars per epoch
// equal to the History, a histogram per weight, and the model's layer graph.
TEST_F(TensorBoardCallback, TensorBoardsOwnReaderLoadsScalarsHistogramsAndTheGraph) {
#if defined(SOMA_PYTHON3) && defined(SOMA_TB_ACCUMULATOR) && defined(SOMA_TB_PYTHON)
  nn::reset_layer_name_counters();
  auto model = compiled_classifier();
  auto h = model.fit(features(16, 5), labels(16, 3, 6),
                     {.epochs = 2, .batch_size = 8,
                      .validation_data = {{features(8, 3), labels(8, 3, 4)}},
                      .callbacks = {TensorBoard({.log_dir = dir_.string(), .histogram_freq = 1})},
                      .verbose = 0});
  // TensorBoard comes from the pinned oracle environment (scripts/oracles.lock).
  auto run = [](const fs::path& d) { return run_python(SOMA_TB_ACCUMULATOR, d.string(), SOMA_TB_PYTHON); };
  ReaderRun rt = run(dir_ / "train");
  if (rt.status == 77 || rt.status == 127)
    GTEST_SKIP() << "no tensorboard in the oracle environment (bash scripts/oracles.sh): " << rt.output;
  ASSERT_EQ(rt.status, 0) << rt.output;
  ReaderRun rv = run(dir_ / "validation");
  ASSERT_EQ(rv.status, 0) << rv.output;
  auto find = [](const ReaderRun& r, const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& l : r.lines)
      if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
    return out;
  };
  for (auto [r, key] : {std::pair{&rt, "loss"}, std::pair{&rt, "accuracy"},
                        std::pair{&rv, "val_loss"}, std::pair{&rv, "val_accuracy"}}) {
    const std::string metric = std::string(key).rfind("val_", 0) == 0 ? std::string(key).substr(4) : key;
    auto v = find(*r, "scalar epoch_" + metric + " ");
    ASSERT_EQ(v.size(), 2u) << key << "\n" << r->output;
    for (int e = 0; e < 2; ++e) {
      std::istringstream is(v[std::size_t(e)]);
      long step = -1;
      double value = 0;
      is >> step >> value;
      EXPECT_EQ(step, e);
      EXPECT_EQ(value, double(float(h[key][std::size_t(e)]))) << key << " epoch " << e;
    }
  }
  auto kernel = find(rt, "histo dense/kernel ");
  ASSERT_EQ(kernel.size(), 2u) << rt.output;
  {
    std::istringstream is(kernel.back());
    long step = -1;
    double lo, hi, num, sum, buckets, count;
    is >> step >> lo >> hi >> num >> sum >> buckets >> count;
    auto w = model.named_parameters()[0].second.value().to_vector<double>();
    EXPECT_EQ(step, 1);
    EXPECT_EQ(num, double(w.size()));
    EXPECT_EQ(count, double(w.size()));
    EXPECT_EQ(lo, *std::min_element(w.begin(), w.end()));
    EXPECT_EQ(hi, *std::max_element(w.begin(), w.end()));
  }
  EXPECT_EQ(find(rt, "node "), (std::vector<std::string>{"input InputLayer -", "dense Dense input",
                                                         "dense_1 Dense dense"}))
      << rt.output;
#else
  GTEST_SKIP() << "no python3 interpreter";
#endif
}

TEST_F(TensorBoardCallback, WithoutValidationDataNoValidationFilesAreWritten) {
  auto model = compiled_classifier();
  model.fit(features(8, 7), labels(8, 3, 8),
            {.epochs = 1, .callbacks = {TensorBoard({.log_dir = dir_.string()})}, .verbose = 0});
  EXPECT_EQ(event_files(dir_ / "train").size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ / "validation"));
}

TEST_F(TensorBoardCallback, UpdateFreqBatchAlsoWritesBatchScalarsAtTheGlobalBatchIndex) {
  SKIP_WITHOUT_READER();
  auto model = compiled_classifier();
  model.fit(features(16, 9), labels(16, 3, 10),
            {.epochs = 2, .batch_size = 8,
             .callbacks = {TensorBoard({.log_dir = dir_.string(), .update_freq = "batch"})},
             .verbose = 0});
  ReaderRun r = run_reader(event_files(dir_ / "train").at(0));
  auto v = values_of(r, "batch_loss");
  ASSERT_EQ(v.size(), 4u) << r.output;  // 2 epochs x 2 batches
  for (int i = 0; i < 4; ++i) EXPECT_EQ(num_field(v[i], "step"), i);
  EXPECT_EQ(values_of(r, "epoch_loss").size(), 2u);
}

TEST_F(TensorBoardCallback, UpdateFreqNumberWritesEveryNthBatch) {
  SKIP_WITHOUT_READER();
  auto model = compiled_classifier();
  model.fit(features(24, 9), labels(24, 3, 10),
            {.epochs = 2, .batch_size = 8,
             .callbacks = {TensorBoard({.log_dir = dir_.string(), .update_freq = 2})},
             .verbose = 0});
  auto v = values_of(run_reader(event_files(dir_ / "train").at(0)), "batch_loss");
  ASSERT_EQ(v.size(), 3u);  // global batches 0, 2, 4 of 6
  EXPECT_EQ(num_field(v[2], "step"), 4);
}

TEST_F(TensorBoardCallback, EachFitStartsNewEventFiles) {
  auto model = compiled_classifier();
  TensorBoard cb({.log_dir = dir_.string()});
  for (int i = 0; i < 2; ++i)
    model.fit(features(8, 7), labels(8, 3, 8), {.epochs = 1, .callbacks = {cb}, .verbose = 0});
  EXPECT_EQ(event_files(dir_ / "train").size(), 2u);
}

TEST_F(TensorBoardCallback, HooksDrivenByHandWriteScalarsWithoutAModel) {
  SKIP_WITHOUT_READER();
  TensorBoard cb({.log_dir = dir_.string()});
  soma::callbacks::Logs logs{{"loss", 0.5}, {"val_loss", 0.625}};
  cb.on_epoch_end(4, logs);
  soma::callbacks::Logs none;
  cb.on_train_end(none);
  auto v = values_of(run_reader(event_files(dir_ / "validation").at(0)), "epoch_loss");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(num_field(v[0], "step"), 4);
  EXPECT_EQ(num_field(v[0], "simple_value"), 0.625);
}

TEST(TensorBoardOptions, WithoutProtobufTheCallbackSaysWhatToInstall) {
  if (tb::available()) GTEST_SKIP() << "soma was built with protobuf";
  std::string msg = error_of([] { TensorBoard(); });
  EXPECT_TRUE(contains(msg, "apt-get install libprotobuf-dev protobuf-compiler")) << msg;
}

TEST(TensorBoardOptions, BadUpdateFreqThrowsNamingTheValue) {
  if (!tb::available()) GTEST_SKIP() << "soma was built without protobuf";
  std::string msg = error_of([] { TensorBoard({.update_freq = "epochs"}); });
  EXPECT_TRUE(contains(msg, "TensorBoard: update_freq")) << msg;
  EXPECT_TRUE(contains(msg, "\"epochs\"")) << msg;
  EXPECT_TRUE(contains(error_of([] { TensorBoard({.update_freq = 0}); }), "got 0"));
}

TEST(TensorBoardOptions, NegativeHistogramFreqThrows) {
  if (!tb::available()) GTEST_SKIP() << "soma was built without protobuf";
  std::string msg = error_of([] { TensorBoard({.histogram_freq = -1}); });
  EXPECT_TRUE(contains(msg, "histogram_freq must be >= 0, got -1")) << msg;
}
