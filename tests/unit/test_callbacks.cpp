// Callbacks: hook order, EarlyStopping, ModelCheckpoint, CSVLogger, LearningRateScheduler,
// ReduceLROnPlateau, TerminateOnNaN, and the weights file they rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "soma/metrics.hpp"
#include "soma/model/callbacks.hpp"
#include "soma/model/model.hpp"
#include "soma/model/sequential.hpp"
#include "soma/model/weights.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/optim/optimizers.hpp"
#include "test_support.hpp"

namespace nn = soma::nn;
namespace optim = soma::optim;
namespace cb = soma::callbacks;
using soma::Tensor;
using soma::testing::rand_tensor;

namespace {

namespace fs = std::filesystem;

// A fresh, empty directory per test.
fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("soma_test_callbacks_" + name + "_" +
                                            std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream is(p);
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

struct Data {
  Tensor x = rand_tensor({16, 3}, 1).cast(soma::DType::f32);
  Tensor y = rand_tensor({16, 1}, 2).cast(soma::DType::f32);
};

nn::Sequential regression_model(double lr = 0.01) {
  soma::set_seed(21);
  nn::Sequential m{nn::Input({3}), nn::Dense(4, nn::tanh), nn::Dense(1)};
  m.compile(optim::SGD({.learning_rate = lr}), nn::MeanSquaredError());
  return m;
}

// Replaces logs[key] at each epoch end with scripted values, so that a monitor sees a chosen
// sequence. Listed before the callback under test.
std::shared_ptr<cb::LambdaCallback> script(const std::string& key, std::vector<double> values) {
  auto c = std::make_shared<cb::LambdaCallback>();
  c->on_epoch_end_fn = [key, values](int epoch, nn::Logs& logs) {
    logs[key] = values.at(std::size_t(epoch));
  };
  return c;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cbt = b.contiguous();
  return std::memcmp(ca.raw_data(), cbt.raw_data(), std::size_t(a.numel()) * soma::dtype_size(a.dtype())) == 0;
}

bool same_weights(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (auto& [k, v] : a)
    if (!b.count(k) || !same_bytes(v, b.at(k))) return false;
  return true;
}

}  // namespace

TEST(Callbacks, HooksRunInKerasOrder) {
  auto model = regression_model();
  Data d;
  std::vector<std::string> seen;
  auto rec = std::make_shared<cb::LambdaCallback>();
  rec->on_train_begin_fn = [&](nn::Logs&) { seen.push_back("train_begin"); };
  rec->on_train_end_fn = [&](nn::Logs&) { seen.push_back("train_end"); };
  rec->on_epoch_begin_fn = [&](int e, nn::Logs&) { seen.push_back("epoch_begin " + std::to_string(e)); };
  rec->on_epoch_end_fn = [&](int e, nn::Logs&) { seen.push_back("epoch_end " + std::to_string(e)); };
  rec->on_train_batch_begin_fn = [&](std::int64_t b, nn::Logs&) { seen.push_back("batch_begin " + std::to_string(b)); };
  rec->on_train_batch_end_fn = [&](std::int64_t b, nn::Logs&) { seen.push_back("batch_end " + std::to_string(b)); };
  rec->on_test_begin_fn = [&](nn::Logs&) { seen.push_back("test_begin"); };
  rec->on_test_end_fn = [&](nn::Logs&) { seen.push_back("test_end"); };
  rec->on_test_batch_begin_fn = [&](std::int64_t b, nn::Logs&) { seen.push_back("test_batch_begin " + std::to_string(b)); };
  rec->on_test_batch_end_fn = [&](std::int64_t b, nn::Logs&) { seen.push_back("test_batch_end " + std::to_string(b)); };
  model.fit(d.x, d.y,
            {.epochs = 2, .batch_size = 8,
             .validation_data = {{d.x.slice(0, 0, 4), d.y.slice(0, 0, 4)}},
             .callbacks = {rec}, .verbose = 0});
  std::vector<std::string> want;
  want.push_back("train_begin");
  for (int e = 0; e < 2; ++e) {
    want.push_back("epoch_begin " + std::to_string(e));
    for (int b = 0; b < 2; ++b) {
      want.push_back("batch_begin " + std::to_string(b));
      want.push_back("batch_end " + std::to_string(b));
    }
    want.insert(want.end(), {"test_begin", "test_batch_begin 0", "test_batch_end 0", "test_end"});
    want.push_back("epoch_end " + std::to_string(e));
  }
  want.push_back("train_end");
  EXPECT_EQ(seen, want);
}

TEST(Callbacks, EpochEndLogsHoldTrainingAndValidationValues) {
  auto model = regression_model();
  Data d;
  nn::Logs last;
  auto rec = std::make_shared<cb::LambdaCallback>();
  rec->on_epoch_end_fn = [&](int, nn::Logs& logs) { last = logs; };
  auto h = model.fit(d.x, d.y, {.validation_data = {{d.x, d.y}}, .callbacks = {rec}, .verbose = 0});
  EXPECT_EQ(last.size(), 2u);
  EXPECT_EQ(last.at("loss"), h["loss"][0]);
  EXPECT_EQ(last.at("val_loss"), h["val_loss"][0]);
}

TEST(Callbacks, StopTrainingEndsTheEpochAfterTheCurrentBatch) {
  auto model = regression_model();
  Data d;
  std::int64_t batches = 0;
  auto stopper = std::make_shared<cb::LambdaCallback>();
  stopper->on_train_batch_end_fn = [&](std::int64_t b, nn::Logs&) {
    ++batches;
    if (b == 1) model.stop_training = true;
  };
  auto h = model.fit(d.x, d.y, {.epochs = 5, .batch_size = 2, .callbacks = {stopper}, .verbose = 0});
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(h.size(), 1u);
}

// ---- EarlyStopping ---------------------------------------------------------------------------

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  auto model = regression_model();
  Data d;
  auto es = std::make_shared<cb::EarlyStopping>(cb::EarlyStoppingOptions{.monitor = "val_loss", .patience = 2});
  auto h = model.fit(d.x, d.y,
                     {.epochs = 10, .validation_data = {{d.x, d.y}},
                      .callbacks = {script("val_loss", {1.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1, 1, 1}), es},
                      .verbose = 0});
  EXPECT_EQ(h.size(), 4u);  // best at epoch 1, then epochs 2 and 3 without improvement
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(es->best_epoch(), 1);
  EXPECT_DOUBLE_EQ(es->best(), 0.5);
}

TEST(EarlyStopping, MinDeltaDemandsALargerImprovement) {
  auto model = regression_model();
  Data d;
  auto es = std::make_shared<cb::EarlyStopping>(
      cb::EarlyStoppingOptions{.monitor = "val_loss", .min_delta = 0.1, .patience = 1});
  auto h = model.fit(d.x, d.y,
                     {.epochs = 10, .validation_data = {{d.x, d.y}},
                      .callbacks = {script("val_loss", {1.0, 0.95, 0.9, 0.85, 0, 0, 0, 0, 0, 0}), es},
                      .verbose = 0});
  EXPECT_EQ(h.size(), 2u);
}

TEST(EarlyStopping, MaxModeForAccuracy) {
  auto model = regression_model();
  Data d;
  auto es = std::make_shared<cb::EarlyStopping>(cb::EarlyStoppingOptions{.monitor = "val_accuracy", .patience = 1});
  auto h = model.fit(d.x, d.y,
                     {.epochs = 10, .validation_data = {{d.x, d.y}},
                      .callbacks = {script("val_accuracy", {0.1, 0.2, 0.3, 0.3, 0.9, 1, 1, 1, 1, 1}), es},
                      .verbose = 0});
  EXPECT_EQ(h.size(), 4u);
}

TEST(EarlyStopping, RestoresTheBestEpochsWeights) {
  auto model = regression_model(0.1);
  Data d;
  std::vector<std::map<std::string, Tensor>> weights;
  auto rec = std::make_shared<cb::LambdaCallback>();
  rec->on_epoch_end_fn = [&](int, nn::Logs&) { weights.push_back(model.get_weights()); };
  auto es = std::make_shared<cb::EarlyStopping>(
      cb::EarlyStoppingOptions{.patience = 2, .restore_best_weights = true});
  model.fit(d.x, d.y,
            {.epochs = 10, .validation_data = {{d.x, d.y}},
             .callbacks = {script("val_loss", {3, 2, 1, 2, 3, 4, 5, 6, 7, 8}), rec, es},
             .verbose = 0});
  ASSERT_EQ(weights.size(), 5u);
  EXPECT_TRUE(same_weights(model.get_weights(), weights[2]));
  EXPECT_FALSE(same_weights(model.get_weights(), weights[4]));
}

TEST(EarlyStopping, MissingMonitorDoesNotStop) {
  auto model = regression_model();
  Data d;
  auto h = model.fit(d.x, d.y,
                     {.epochs = 3, .callbacks = {cb::EarlyStopping({.monitor = "val_nothing"})},
                      .verbose = 0});
  EXPECT_EQ(h.size(), 3u);
}

TEST(EarlyStopping, BadModeIsAnError) {
  try {
    cb::EarlyStopping es({.mode = "largest"});
    FAIL() << "no error";
  } catch (const soma::Error& e) {
    EXPECT_STREQ(e.what(), "EarlyStopping: mode must be \"auto\", \"min\" or \"max\", got \"largest\"");
  }
}

// ---- ModelCheckpoint -------------------------------------------------------------------------

TEST(ModelCheckpoint, SaveBestOnlyWritesOnlyOnImprovement) {
  auto dir = temp_dir("best");
  auto model = regression_model(0.1);
  Data d;
  std::vector<std::map<std::string, Tensor>> weights;
  auto rec = std::make_shared<cb::LambdaCallback>();
  rec->on_epoch_end_fn = [&](int, nn::Logs&) { weights.push_back(model.get_weights()); };
  auto ckpt = std::make_shared<cb::ModelCheckpoint>((dir / "w_{epoch:02d}.soma").string(),
                                                    cb::ModelCheckpointOptions{.save_best_only = true});
  model.fit(d.x, d.y,
            {.epochs = 4, .validation_data = {{d.x, d.y}},
             .callbacks = {script("val_loss", {1.0, 2.0, 0.5, 0.7}), rec, ckpt}, .verbose = 0});
  EXPECT_TRUE(fs::exists(dir / "w_01.soma"));
  EXPECT_FALSE(fs::exists(dir / "w_02.soma"));
  EXPECT_TRUE(fs::exists(dir / "w_03.soma"));
  EXPECT_FALSE(fs::exists(dir / "w_04.soma"));
  EXPECT_EQ(ckpt->saved_paths().size(), 2u);
  EXPECT_FALSE(fs::exists(dir / "w_03.soma.tmp"));
  // The file holds exactly the weights of epoch 3 (index 2), bit for bit.
  EXPECT_TRUE(same_weights(nn::read_weights_file((dir / "w_03.soma").string()), weights[2]));
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, LoadWeightsRestoresTheSavedModel) {
  auto dir = temp_dir("load");
  auto model = regression_model(0.1);
  Data d;
  const std::string path = (dir / "last.soma").string();
  model.fit(d.x, d.y, {.epochs = 2, .callbacks = {cb::ModelCheckpoint(path)}, .verbose = 0});
  auto trained = model.get_weights();
  model.fit(d.x, d.y, {.epochs = 1, .verbose = 0});  // moves the weights on
  EXPECT_FALSE(same_weights(model.get_weights(), trained));
  model.load_weights(path);
  EXPECT_TRUE(same_weights(model.get_weights(), trained));
  fs::remove_all(dir);
}

// A diverged epoch (weights turned NaN here, as a too-high rate would) never replaces the last
// good checkpoint: the file keeps epoch 1's weights (issue 19).
TEST(ModelCheckpoint, ADivergedEpochKeepsTheLastGoodCheckpoint) {
  auto dir = temp_dir("diverged");
  auto model = regression_model(0.1);
  Data d;
  const std::string path = (dir / "last.soma").string();
  std::map<std::string, Tensor> good;
  auto poison = std::make_shared<cb::LambdaCallback>();
  poison->on_epoch_end_fn = [&](int epoch, nn::Logs&) {
    if (epoch == 0) {
      good = model.get_weights();
      return;
    }
    auto w = model.get_weights();
    for (auto& [k, t] : w) t = soma::full_like(t, std::numeric_limits<double>::quiet_NaN());
    model.set_weights(w);
  };
  auto ckpt = std::make_shared<cb::ModelCheckpoint>(path);
  model.fit(d.x, d.y, {.epochs = 3, .callbacks = {poison, ckpt}, .verbose = 0});
  EXPECT_EQ(ckpt->saved_paths().size(), 1u);
  EXPECT_TRUE(same_weights(nn::read_weights_file(path), good));
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, FilepathTakesEpochAndLogFields) {
  EXPECT_EQ(cb::format_filepath("m_{epoch}_{val_loss:.2f}.w", 4, {{"val_loss", 0.12345}}),
            "m_5_0.12.w");
  EXPECT_EQ(cb::format_filepath("e{epoch:03d}", 0, {}), "e001");
  try {
    cb::format_filepath("m_{acc}", 0, {{"loss", 1.0}});
    FAIL() << "no error";
  } catch (const soma::Error& e) {
    EXPECT_TRUE(std::string(e.what()).find("names 'acc', which is not in the logs") != std::string::npos) << e.what();
  }
}

// ---- weights file ----------------------------------------------------------------------------

TEST(WeightsFile, RoundTripsEveryDtypeBitForBit) {
  auto dir = temp_dir("file");
  std::map<std::string, Tensor> w;
  w["a"] = rand_tensor({2, 3}, 1);
  w["b/c"] = rand_tensor({4}, 2).cast(soma::DType::f32);
  w["i"] = soma::arange(5.0, soma::DType::i64);
  w["s"] = soma::scalar(2.5, soma::DType::f16);
  const std::string path = (dir / "w.bin").string();
  nn::write_weights_file(path, w);
  EXPECT_TRUE(same_weights(nn::read_weights_file(path), w));
  fs::remove_all(dir);
}

TEST(WeightsFile, RejectsAFileThatIsNotOne) {
  auto dir = temp_dir("bad");
  const std::string path = (dir / "junk.bin").string();
  std::ofstream(path) << "hello, world";
  try {
    nn::read_weights_file(path);
    FAIL() << "no error";
  } catch (const soma::Error& e) {
    EXPECT_EQ(std::string(e.what()), "load_weights: '" + path + "' is not a soma weights file (bad magic)");
  }
  fs::remove_all(dir);
}

TEST(WeightsFile, RejectsATruncatedFile) {
  auto dir = temp_dir("trunc");
  const std::string path = (dir / "w.bin").string();
  nn::write_weights_file(path, {{"k", rand_tensor({8, 8}, 1)}});
  fs::resize_file(path, fs::file_size(path) - 10);
  try {
    nn::read_weights_file(path);
    FAIL() << "no error";
  } catch (const soma::Error& e) {
    EXPECT_TRUE(std::string(e.what()).find("is truncated") != std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// ---- CSVLogger -------------------------------------------------------------------------------

TEST(CSVLogger, WritesAHeaderAndOneRowPerEpoch) {
  auto dir = temp_dir("csv");
  auto model = regression_model();
  Data d;
  const auto path = dir / "log.csv";
  auto h = model.fit(d.x, d.y,
                     {.epochs = 2, .validation_data = {{d.x, d.y}},
                      .callbacks = {cb::CSVLogger(path.string())}, .verbose = 0});
  std::istringstream is(read_file(path));
  std::string header, row0, row1, extra;
  std::getline(is, header);
  std::getline(is, row0);
  std::getline(is, row1);
  EXPECT_FALSE(std::getline(is, extra));
  EXPECT_EQ(header, "epoch,loss,val_loss");
  // Values are written with full (round-trip) precision.
  EXPECT_EQ(row0.rfind("0,", 0), 0u);
  double loss = 0, val = 0;
  ASSERT_EQ(std::sscanf(row1.c_str(), "1,%lf,%lf", &loss, &val), 2) << row1;
  EXPECT_EQ(loss, h["loss"][1]);
  EXPECT_EQ(val, h["val_loss"][1]);
  fs::remove_all(dir);
}

TEST(CSVLogger, AppendAddsRowsWithoutASecondHeader) {
  auto dir = temp_dir("csv_append");
  auto model = regression_model();
  Data d;
  const auto path = dir / "log.csv";
  model.fit(d.x, d.y, {.epochs = 1, .callbacks = {cb::CSVLogger(path.string(), ';')}, .verbose = 0});
  model.fit(d.x, d.y, {.epochs = 2, .callbacks = {cb::CSVLogger(path.string(), ';', true)}, .verbose = 0});
  std::string s = read_file(path);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
  EXPECT_EQ(s.find("epoch;loss"), 0u) << s;
  EXPECT_EQ(s.find("epoch", 1), std::string::npos) << s;
  fs::remove_all(dir);
}

// ---- learning rate ---------------------------------------------------------------------------

TEST(LearningRateScheduler, SetsTheRateAtEachEpochStart) {
  auto model = regression_model(0.5);
  Data d;
  std::vector<double> seen;
  auto rec = std::make_shared<cb::LambdaCallback>();
  rec->on_epoch_begin_fn = [&](int, nn::Logs&) { seen.push_back(model.optimizer().learning_rate()); };
  auto h = model.fit(d.x, d.y,
                     {.epochs = 3,
                      .callbacks = {cb::LearningRateScheduler(
                                        [](int epoch, double lr) { return epoch == 0 ? 0.1 : lr / 2; }),
                                    rec},
                      .verbose = 0});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_DOUBLE_EQ(seen[0], 0.1);
  EXPECT_DOUBLE_EQ(seen[1], 0.05);
  EXPECT_DOUBLE_EQ(seen[2], 0.025);
  EXPECT_EQ(h["learning_rate"], (std::vector<double>{0.1, 0.05, 0.025}));
}

TEST(ReduceLROnPlateau, LowersTheRateAfterPatienceEpochs) {
  auto model = regression_model(0.1);
  Data d;
  auto h = model.fit(d.x, d.y,
                     {.epochs = 5, .validation_data = {{d.x, d.y}},
                      .callbacks = {script("val_loss", {1, 1, 1, 1, 1}),
                                    cb::ReduceLROnPlateau({.factor = 0.5, .patience = 2})},
                      .verbose = 0});
  // Logged before each epoch's decision: the rate drops after epochs 2 and 4.
  const auto& lr = h["learning_rate"];
  ASSERT_EQ(lr.size(), 5u);
  EXPECT_NEAR(lr[0], 0.1, 1e-12);
  EXPECT_NEAR(lr[2], 0.1, 1e-12);
  EXPECT_NEAR(lr[3], 0.05, 1e-12);
  EXPECT_NEAR(model.optimizer().learning_rate(), 0.025, 1e-12);
}

// ---- TerminateOnNaN --------------------------------------------------------------------------

TEST(TerminateOnNaN, StopsAtTheFirstNaNLoss) {
  auto model = regression_model();
  Data d;
  Tensor x = d.x.clone();
  x.data<float>()[3 * 3] = std::numeric_limits<float>::quiet_NaN();  // sample 3, batch 1
  std::int64_t batches = 0;
  auto counter = std::make_shared<cb::LambdaCallback>();
  counter->on_train_batch_end_fn = [&](std::int64_t, nn::Logs&) { ++batches; };
  auto nan_stop = std::make_shared<cb::TerminateOnNaN>();
  auto h = model.fit(x, d.y,
                     {.epochs = 3, .batch_size = 2, .shuffle = false,
                      .callbacks = {counter, nan_stop}, .verbose = 0});
  EXPECT_TRUE(nan_stop->terminated());
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_TRUE(std::isnan(h["loss"][0]));
}

TEST(TerminateOnNaN, LeavesFiniteTrainingAlone) {
  auto model = regression_model();
  Data d;
  auto nan_stop = std::make_shared<cb::TerminateOnNaN>();
  auto h = model.fit(d.x, d.y, {.epochs = 2, .callbacks = {nan_stop}, .verbose = 0});
  EXPECT_FALSE(nan_stop->terminated());
  EXPECT_EQ(h.size(), 2u);
}
