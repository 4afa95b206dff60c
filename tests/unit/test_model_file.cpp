// Model files: save/load round trips for every layer type and optimiser, and clear errors for
// corrupted, truncated, wrong-version and mismatched files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "soma/model/serialization.hpp"
#include "soma/model/weights.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace soma;
using soma::testing::rand_tensor;

namespace {

std::string temp_file(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("soma_model_file_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

bool same_bits(const Tensor& a0, const Tensor& b0) {
  if (a0.shape() != b0.shape() || a0.dtype() != b0.dtype()) return false;
  Tensor a = a0.contiguous(), b = b0.contiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), std::size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

using soma::testing::error_of;

Tensor labels(std::int64_t n, int classes, std::uint64_t seed) {
  return soma::floor(rand_tensor({n}, seed, 0.0, classes - 1e-3)).cast(DType::i64);
}

// ---- every layer type: predictions bit-identical after save + load_model -------------------
struct LayerCase {
  std::string name;
  std::function<nn::Sequential()> make;
  std::function<Tensor()> input;
};

std::vector<LayerCase> layer_cases() {
  auto x = [](Shape s) { return [s] { return rand_tensor(s, 42); }; };
  return {
      {"Dense", [] { return nn::Sequential{nn::Input({5}), nn::Dense(4, nn::relu, {.kernel_regularizer = nn::regularizers::l2(0.01)}), nn::Dense(3, {.use_bias = false})}; },
       x({6, 5})},
      {"Conv2D", [] { return nn::Sequential{nn::Input({2, 6, 6}), nn::Conv2D(3, 3, {.strides = 2, .padding = "same", .activation = nn::relu})}; },
       x({2, 2, 6, 6})},
      {"Conv1D", [] { return nn::Sequential{nn::Input({2, 9}), nn::Conv1D(3, 3, {.strides = 2, .padding = 1, .activation = nn::relu})}; },
       x({2, 2, 9})},
      {"Conv3D", [] { return nn::Sequential{nn::Input({2, 4, 6, 6}), nn::Conv3D(3, 3, {.strides = {1, 2, 2}, .padding = "same", .activation = nn::relu})}; },
       x({2, 2, 4, 6, 6})},
      {"MaxPool3D", [] { return nn::Sequential{nn::Input({2, 4, 6, 6}), nn::Conv3D(2, 1), nn::MaxPool3D({2, 2, 2})}; },
       x({2, 2, 4, 6, 6})},
      {"AvgPool3D", [] { return nn::Sequential{nn::Input({2, 4, 6, 6}), nn::Conv3D(2, 1), nn::AvgPool3D({3, 3, 3}, nn::Size3{2}, "same")}; },
       x({2, 2, 4, 6, 6})},
      {"GlobalAveragePooling3D", [] { return nn::Sequential{nn::Input({2, 3, 5, 5}), nn::Conv3D(3, 2), nn::GlobalAveragePooling3D()}; },
       x({2, 2, 3, 5, 5})},
      {"GlobalMaxPooling2D", [] { return nn::Sequential{nn::Input({2, 5, 5}), nn::Conv2D(3, 3), nn::GlobalMaxPooling2D()}; },
       x({2, 2, 5, 5})},
      {"GlobalMaxPooling1D", [] { return nn::Sequential{nn::Input({2, 9}), nn::Conv1D(3, 3), nn::GlobalMaxPooling1D()}; },
       x({2, 2, 9})},
      {"Conv2DTranspose", [] { return nn::Sequential{nn::Input({2, 4, 4}), nn::Conv2DTranspose(3, {3, 3}, {.strides = 2, .padding = "same"})}; },
       x({2, 2, 4, 4})},
      {"MaxPool2D", [] { return nn::Sequential{nn::Input({2, 6, 6}), nn::Conv2D(2, 3), nn::MaxPool2D(2)}; },
       x({2, 2, 6, 6})},
      {"AvgPool2D", [] { return nn::Sequential{nn::Input({2, 6, 6}), nn::Conv2D(2, 1), nn::AvgPool2D({3, 3}, 2, "same")}; },
       x({2, 2, 6, 6})},
      {"GlobalAveragePooling2D", [] { return nn::Sequential{nn::Input({2, 5, 5}), nn::Conv2D(3, 3), nn::GlobalAveragePooling2D()}; },
       x({2, 2, 5, 5})},
      {"Flatten", [] { return nn::Sequential{nn::Input({2, 3, 4}), nn::Flatten(), nn::Dense(3)}; }, x({3, 2, 3, 4})},
      {"Reshape", [] { return nn::Sequential{nn::Input({12}), nn::Reshape({3, 4}), nn::Dense(2)}; }, x({3, 12})},
      {"Dropout", [] { return nn::Sequential{nn::Input({6}), nn::Dense(4), nn::Dropout(0.3, 7)}; }, x({3, 6})},
      {"BatchNormalization", [] { return nn::Sequential{nn::Input({4}), nn::Dense(4), nn::BatchNormalization({.momentum = 0.5, .epsilon = 1e-2})}; },
       x({8, 4})},
      {"LayerNormalization", [] { return nn::Sequential{nn::Input({3, 4}), nn::LayerNormalization({.axis = {-2, -1}})}; },
       x({2, 3, 4})},
      {"Embedding", [] { return nn::Sequential{nn::Input({5}, {.dtype = DType::i64}), nn::Embedding(10, 3), nn::Flatten()}; },
       [] { return soma::floor(rand_tensor({4, 5}, 9, 0.0, 9.99)).cast(DType::i64); }},
      {"ActivationLayers", [] {
         return nn::Sequential{nn::Input({6}), nn::Dense(6), nn::ReLU(), nn::Dense(6), nn::LeakyReLU(0.1), nn::ELU(0.5),
                               nn::GELU(true), nn::Sigmoid(), nn::Tanh(), nn::ActivationLayer("swish"), nn::Softmax(-1),
                               nn::Step()};
       },
       x({3, 6})},
      {"SimpleRNN", [] { return nn::Sequential{nn::Input({4, 3}), nn::SimpleRNN(5, {.return_sequences = true})}; }, x({2, 4, 3})},
      {"LSTM", [] { return nn::Sequential{nn::Input({4, 3}), nn::LSTM(5, {.use_bias = true, .go_backwards = true})}; }, x({2, 4, 3})},
      {"GRU", [] { return nn::Sequential{nn::Input({4, 3}), nn::GRU(5, {.reset_after = false})}; }, x({2, 4, 3})},
      {"GRUResetAfter", [] { return nn::Sequential{nn::Input({4, 3}), nn::GRU(5)}; }, x({2, 4, 3})},
      {"NestedSequential", [] {
         return nn::Sequential{nn::Input({4}), nn::Sequential{nn::Dense(3, nn::tanh), nn::Dense(2)}, nn::Dense(2)};
       },
       x({3, 4})},
      {"Float64", [] { return nn::Sequential{nn::Input({3}), nn::Dense(2, {.dtype = DType::f64})}; }, x({2, 3})},
  };
}

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

class LayerRoundTrip : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerRoundTrip, PredictionsAreBitIdenticalAfterLoad) {
  const auto& c = GetParam();
  auto model = c.make();
  Tensor x = c.input();
  {  // one training-mode pass moves BatchNormalization's moving statistics off their defaults
    model.train();
    (void)model(x);
    model.eval();
  }
  Tensor before = model.predict(x);
  const std::string path = temp_file(c.name + ".soma");
  model.save(path);
  auto loaded = load_model(path);
  Tensor after = loaded->predict(x);
  EXPECT_TRUE(same_bits(before, after)) << c.name;
  EXPECT_EQ(serialization::model_config(model), serialization::model_config(*loaded));
  auto w0 = model.get_weights(), w1 = loaded->get_weights();
  ASSERT_EQ(w0.size(), w1.size());
  for (auto& [k, t] : w0) EXPECT_TRUE(same_bits(t, w1.at(k))) << k;
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(EveryLayer, LayerRoundTrip, ::testing::ValuesIn(layer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(LayerConfig, DenseConfigReadsLikeKeras) {
  nn::Dense d(7, nn::relu, {.use_bias = false});
  d.set_name("hidden");
  const std::string cfg = serialization::layer_config(d);
  EXPECT_NE(cfg.find("\"class_name\":\"Dense\""), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"units\":7"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"activation\":\"relu\""), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"use_bias\":false"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"name\":\"hidden\""), std::string::npos) << cfg;
  auto back = serialization::layer_from_config(cfg);
  EXPECT_EQ(back->name(), "hidden");
  EXPECT_EQ(serialization::layer_config(*back), cfg);
}

// ---- every optimiser: 2 epochs + save + load + 1 epoch == 3 uninterrupted epochs ----------
struct OptCase {
  std::string name;
  std::function<optim::OptimizerRef()> make;
};

nn::Sequential small_net() {
  return nn::Sequential{nn::Input({8}), nn::Dense(16, nn::relu), nn::BatchNormalization(), nn::Dense(3)};
}

void PrintTo(const OptCase& c, std::ostream* os) { *os << c.name; }

class OptimizerResume : public ::testing::TestWithParam<OptCase> {};

TEST_P(OptimizerResume, ResumedTrainingMatchesUninterruptedRun) {
  const auto& c = GetParam();
  Tensor x = rand_tensor({40, 8}, 3), y = labels(40, 3, 4);
  auto compile = [&](nn::Model& m) {
    m.compile(c.make(), nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::get("accuracy")});
  };
  nn::FitOptions fo{.epochs = 3, .batch_size = 8, .verbose = 0, .seed = 11};

  auto a = small_net();
  auto w0 = a.get_weights();
  compile(a);
  auto full = a.fit(x, y, fo);

  auto b = small_net();
  b.set_weights(w0);
  compile(b);
  fo.epochs = 2;
  auto first = b.fit(x, y, fo);
  const std::string path = temp_file("resume_" + c.name + ".soma");
  b.save(path);
  auto r = load_model(path);
  ASSERT_TRUE(r->compiled());
  EXPECT_EQ(r->optimizer().name(), b.optimizer().name());
  EXPECT_EQ(r->optimizer().iterations(), b.optimizer().iterations());
  fo.epochs = 3;
  fo.initial_epoch = 2;
  auto rest = r->fit(x, y, fo);

  ASSERT_EQ(full["loss"].size(), 3u);
  ASSERT_EQ(rest["loss"].size(), 1u);
  EXPECT_EQ(first["loss"][0], full["loss"][0]);
  EXPECT_EQ(first["loss"][1], full["loss"][1]);
  EXPECT_EQ(rest["loss"][0], full["loss"][2]) << c.name;
  EXPECT_EQ(rest["accuracy"][0], full["accuracy"][2]);
  auto wa = a.get_weights(), wr = r->get_weights();
  for (auto& [k, t] : wa) EXPECT_TRUE(same_bits(t, wr.at(k))) << k;
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    EveryOptimizer, OptimizerResume,
    ::testing::Values(
        OptCase{"SGD", [] { return optim::OptimizerRef(optim::SGD({.learning_rate = 0.05})); }},
        OptCase{"SGDMomentum", [] { return optim::OptimizerRef(optim::SGD({.learning_rate = 0.05, .momentum = 0.9})); }},
        OptCase{"SGDNesterov", [] {
                  return optim::OptimizerRef(optim::SGD({.learning_rate = 0.05, .momentum = 0.9, .nesterov = true, .clipnorm = 1.0}));
                }},
        OptCase{"Adam", [] { return optim::OptimizerRef(optim::Adam({.learning_rate = 0.01})); }},
        OptCase{"AdamAmsgrad", [] { return optim::OptimizerRef(optim::Adam({.learning_rate = 0.01, .amsgrad = true})); }},
        OptCase{"AdamW", [] { return optim::OptimizerRef(optim::AdamW({.learning_rate = 0.01, .weight_decay = 0.01})); }},
        OptCase{"Nadam", [] { return optim::OptimizerRef(optim::Nadam({.learning_rate = 0.01})); }},
        OptCase{"RMSprop", [] {
                  return optim::OptimizerRef(optim::RMSprop({.learning_rate = 0.01, .momentum = 0.5, .centered = true}));
                }},
        OptCase{"Adagrad", [] { return optim::OptimizerRef(optim::Adagrad({.learning_rate = 0.05})); }}),
    [](const auto& info) { return info.param.name; });

// ---- damaged files --------------------------------------------------------------------------
class DamagedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path = temp_file("damaged.soma");
    auto m = small_net();
    m.compile(optim::Adam(), nn::MeanSquaredError());
    m.save(path);
    std::ifstream is(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(is), {});
  }
  void TearDown() override { fs::remove(path); }
  void write(const std::string& b) {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    os.write(b.data(), std::streamsize(b.size()));
  }
  std::string path, bytes;
};

TEST_F(DamagedFile, FlippedByteIsAChecksumError) {
  std::string b = bytes;
  b[b.size() / 2] ^= 0x10;
  write(b);
  const std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
}

TEST_F(DamagedFile, TruncatedFileIsAnError) {
  write(bytes.substr(0, bytes.size() - 100));
  const std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find("is truncated"), std::string::npos) << e;
}

TEST_F(DamagedFile, FileCutInsideTheHeaderIsAnError) {
  write(bytes.substr(0, 12));
  const std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find("is truncated"), std::string::npos) << e;
}

TEST_F(DamagedFile, EmptyFileIsAnError) {
  write("");
  EXPECT_NE(error_of([&] { load_model(path); }).find("is truncated"), std::string::npos);
}

TEST_F(DamagedFile, WrongVersionIsAnError) {
  std::string b = bytes;
  const std::uint32_t v = 99;
  std::memcpy(b.data() + 8, &v, 4);
  write(b);
  const std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find("format version 99"), std::string::npos) << e;
}

TEST_F(DamagedFile, BadMagicIsAnError) {
  std::string b = bytes;
  b[0] = 'X';
  write(b);
  EXPECT_NE(error_of([&] { load_model(path); }).find("not a soma model file"), std::string::npos);
}

TEST_F(DamagedFile, AbsurdDeclaredSizeIsRefusedBeforeAllocating) {
  std::string b = bytes;
  const std::uint64_t huge = std::uint64_t(1) << 62;
  std::memcpy(b.data() + 16, &huge, 8);
  write(b);
  const std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find("is truncated"), std::string::npos) << e;
}

TEST_F(DamagedFile, EveryTruncationIsACleanError) {
  // No length may crash or succeed: each prefix is a soma::Error.
  for (std::size_t n = 0; n < bytes.size(); n += std::max<std::size_t>(1, bytes.size() / 97)) {
    write(bytes.substr(0, n));
    EXPECT_NE(error_of([&] { load_model(path); }), soma::testing::kNoError) << n;
  }
}

TEST_F(DamagedFile, MissingFileIsAnError) {
  EXPECT_NE(error_of([&] { load_model(path + ".absent"); }).find("cannot open"), std::string::npos);
}

// ---- weights by layer name ------------------------------------------------------------------
nn::ModuleRef named(nn::ModuleRef m, const std::string& name) {
  m->set_name(name);
  return m;
}

TEST(Weights, LoadMatchesLayersByNameNotPosition) {
  nn::Sequential a{nn::Input({3}), named(nn::Dense(4), "hidden"), named(nn::Dense(2), "out")};
  const std::string path = temp_file("byname.soma");
  a.save_weights(path);
  // Same names, other positions (a weightless layer in between).
  nn::Sequential b{nn::Input({3}), named(nn::Dense(4), "hidden"), nn::Dropout(0.5), named(nn::Dense(2), "out")};
  b.load_weights(path);
  Tensor x = rand_tensor({2, 3}, 5);
  EXPECT_TRUE(same_bits(a.predict(x), b.predict(x)));
  fs::remove(path);
}

TEST(Weights, ShapeMismatchNamesTheLayerAndShapes) {
  nn::Sequential a{nn::Input({3}), named(nn::Dense(4), "hidden"), named(nn::Dense(2), "out")};
  const std::string path = temp_file("mismatch.soma");
  a.save_weights(path);
  nn::Sequential b{nn::Input({3}), named(nn::Dense(5), "hidden"), named(nn::Dense(2), "out")};
  const std::string e = error_of([&] { b.load_weights(path); });
  EXPECT_NE(e.find("'hidden/kernel': file has [3, 4] f32, model has [3, 5] f32"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
  fs::remove(path);
}

TEST(Weights, MissingAndUnexpectedLayersAreListed) {
  nn::Sequential a{nn::Input({3}), named(nn::Dense(4), "hidden"), named(nn::Dense(2), "out")};
  const std::string path = temp_file("names.soma");
  a.save_weights(path);
  nn::Sequential b{nn::Input({3}), named(nn::Dense(4), "hidden"), named(nn::Dense(2), "head")};
  const std::string e = error_of([&] { b.load_weights(path); });
  EXPECT_NE(e.find("layers missing from the file: 'head'"), std::string::npos) << e;
  EXPECT_NE(e.find("layers in the file but not in the model: 'out'"), std::string::npos) << e;
  fs::remove(path);
}

TEST(Weights, ReadWeightsFileReturnsStateDictKeys) {
  nn::Sequential a{nn::Input({3}), nn::Dense(4), nn::Dense(2)};
  const std::string path = temp_file("state.soma");
  a.save_weights(path);
  auto w = nn::read_weights_file(path);
  auto s = a.state_dict();
  ASSERT_EQ(w.size(), s.size());
  for (auto& [k, t] : s) EXPECT_TRUE(same_bits(t, w.at(k))) << k;
  fs::remove(path);
}

TEST(Weights, WeightsFileIsNotAModelFile) {
  nn::Sequential a{nn::Input({3}), nn::Dense(2)};
  const std::string path = temp_file("wonly.soma");
  a.save_weights(path);
  EXPECT_NE(error_of([&] { load_model(path); }).find("holds weights only"), std::string::npos);
  fs::remove(path);
}

TEST(ModelFile, FunctionalModelSavesWhole) {  // more in test_model_file_functional
  auto in = nn::Input({3});
  auto out = nn::call(nn::Dense(2), in);
  nn::Model m(in, out);
  const std::string path = temp_file("functional.soma");
  m.save(path);
  Tensor x = rand_tensor({4, 3}, 5);
  EXPECT_TRUE(same_bits(m.predict(x), load_model(path)->predict(x)));
  fs::remove(path);
}

TEST(ModelFile, Version1FileStillLoads) {
  // A version-2 file of a Sequential model with a constant rate holds what version 1 wrote.
  auto m = small_net();
  m.compile(optim::Adam({.learning_rate = 0.003}), nn::MeanSquaredError());
  const std::string path = temp_file("v1.soma");
  m.save(path);
  std::string b;
  {
    std::ifstream is(path, std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(is), {});
  }
  const std::uint32_t v1 = 1;
  std::memcpy(b.data() + 8, &v1, 4);  // the version is outside the checksummed payload
  {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    os.write(b.data(), std::streamsize(b.size()));
  }
  auto r = load_model(path);
  EXPECT_DOUBLE_EQ(r->optimizer().learning_rate(), 0.003);
  Tensor x = rand_tensor({4, 8}, 5);
  EXPECT_TRUE(same_bits(m.predict(x), r->predict(x)));
  fs::remove(path);
}

TEST(ModelFile, UncompiledModelLoadsUncompiled) {
  nn::Sequential a{nn::Input({3}), nn::Dense(2)};
  const std::string path = temp_file("plain.soma");
  a.save(path);
  auto r = load_model(path);
  EXPECT_FALSE(r->compiled());
  fs::remove(path);
}

TEST(ModelFile, SaveLeavesNoTemporaryFile) {
  nn::Sequential a{nn::Input({3}), nn::Dense(2)};
  const std::string path = temp_file("tmpcheck.soma");
  a.save(path);
  for (auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove(path);
}

TEST(ModelFile, CheckpointCallbackCanSaveWholeModels) {
  nn::Sequential a{nn::Input({3}), nn::Dense(2)};
  a.compile(optim::SGD(), nn::MeanSquaredError());
  const std::string path = temp_file("ckpt.soma");
  auto ckpt = std::make_shared<soma::callbacks::ModelCheckpoint>(
      path, soma::callbacks::ModelCheckpointOptions{.save_weights_only = false});
  a.fit(rand_tensor({8, 3}, 1), rand_tensor({8, 2}, 2), {.epochs = 1, .callbacks = {ckpt}, .verbose = 0});
  auto r = load_model(path);
  EXPECT_TRUE(r->compiled());
  EXPECT_EQ(r->optimizer().iterations(), a.optimizer().iterations());
  fs::remove(path);
}

}  // namespace
