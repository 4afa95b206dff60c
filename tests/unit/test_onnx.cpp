// ONNX export and import: every layer exports, the file passes onnx.checker (Debian's
// python3-onnx, full check), and importing it back predicts what the soma model predicts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

#ifndef SOMA_ONNX_PYTHON
#define SOMA_ONNX_PYTHON "/usr/bin/python3"
#endif
#ifndef SOMA_ONNX_SCRIPTS
#define SOMA_ONNX_SCRIPTS "tests/onnx"
#endif

using namespace soma;
namespace fs = std::filesystem;
using soma::testing::all_close;

namespace {

#ifndef SOMA_ONNX_WORKDIR
#define SOMA_ONNX_WORKDIR "onnx_data"
#endif

fs::path work_dir() {
  fs::path d = fs::path(SOMA_ONNX_WORKDIR) / "test_onnx";
  fs::create_directories(d);
  return d;
}

using soma::testing::error_of;

// Runs the checker script on the files; 77 means python3-onnx is missing.
int run_checker(const std::vector<std::string>& paths, std::string* log) {
  fs::path out = work_dir() / "checker.log";
  std::string cmd = std::string(SOMA_ONNX_PYTHON) + " " SOMA_ONNX_SCRIPTS "/check_model.py";
  for (auto& p : paths) cmd += " '" + p + "'";
  cmd += " > '" + out.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  *log = ss.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// A model to export, an input batch for it, and the export options.
struct Case {
  std::string name;
  std::function<std::shared_ptr<nn::Model>()> model;
  std::function<std::vector<Tensor>()> input;
  std::int64_t opset = 17;
};

Tensor randf(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return soma::testing::rand_tensor(s, seed, lo, hi).cast(DType::f32);
}

// Non-default BatchNormalization statistics, so that export must carry them.
void perturb_batch_norms(nn::Module& m, std::uint64_t seed) {
  NoGradScope no_grad;
  for (auto& [name, v] : m.named_parameters()) {
    Variable var = v;
    if (name.find("moving_mean") != std::string::npos) var.assign(randf(v.shape(), seed++, -0.5, 0.5));
    if (name.find("moving_variance") != std::string::npos) var.assign(randf(v.shape(), seed++, 0.5, 1.5));
    if (name.find("gamma") != std::string::npos) var.assign(randf(v.shape(), seed++, 0.5, 1.5));
    if (name.find("beta") != std::string::npos) var.assign(randf(v.shape(), seed++, -0.3, 0.3));
  }
}

template <class... L>
std::shared_ptr<nn::Model> seq(L&&... layers) {
  auto m = std::make_shared<nn::Sequential>(std::forward<L>(layers)...);
  perturb_batch_norms(*m, 7);
  return m;
}

std::vector<Case> cases() {
  using nn::Input, nn::Dense, nn::Dropout, nn::Conv2D, nn::Conv2DTranspose, nn::MaxPool2D,
      nn::AvgPool2D, nn::GlobalAveragePooling2D, nn::Flatten, nn::Reshape, nn::BatchNormalization,
      nn::LayerNormalization, nn::Embedding, nn::SimpleRNN, nn::LSTM, nn::GRU, nn::LeakyReLU,
      nn::ELU, nn::GELU, nn::Sigmoid, nn::Tanh, nn::ReLU, nn::Softmax, nn::Step, nn::Model,
      nn::SymbolicTensor, nn::Concatenate, nn::Average, nn::Multiply;
  std::vector<Case> c;
  c.push_back({"mlp",
               [] {
                 return seq(Input({8}), Dense(16, nn::relu), Dropout(0.3), Dense(8, "tanh"),
                            Dense(4, nn::softmax));
               },
               [] { return std::vector<Tensor>{randf({5, 8}, 1)}; }});
  c.push_back({"cnn",
               [] {
                 return seq(Input({2, 9, 9}), Conv2D(4, 3, {.padding = "same", .activation = nn::relu}),
                            BatchNormalization({.axis = 1}), MaxPool2D(2),
                            Conv2D(6, {2, 3}, {.strides = 2, .padding = "same"}),
                            AvgPool2D(2, Size2(1), "same"), GlobalAveragePooling2D(), Dense(3));
               },
               [] { return std::vector<Tensor>{randf({3, 2, 9, 9}, 2)}; }});
  c.push_back({"conv_variants",
               [] {
                 return seq(Input({4, 7, 7}),
                            Conv2D(4, 3, {.dilation_rate = 2, .groups = 2, .activation = nn::elu}),
                            Conv2DTranspose(3, 3, {.strides = 2, .padding = "same"}),
                            Conv2DTranspose(2, {2, 3}, {.strides = 2, .padding = "valid"}),
                            Conv2DTranspose(2, 3, {.strides = 2, .padding = "same",
                                                   .output_padding = Size2(1, 1)}),
                            MaxPool2D(3, Size2(2), "same"), GlobalAveragePooling2D(true), Flatten());
               },
               [] { return std::vector<Tensor>{randf({2, 4, 7, 7}, 3)}; }});
  c.push_back({"activations",
               [] {
                 return seq(Input({6}), Dense(6, "leaky_relu"), LeakyReLU(0.1), Dense(6, "elu"),
                            ELU(0.5), Dense(6, "gelu"), GELU(true), Dense(6, "swish"),
                            Dense(6, "softplus"), Dense(6, "sigmoid"), Sigmoid(), Tanh(), ReLU(),
                            Dense(6, "log_softmax"), Softmax());
               },
               [] { return std::vector<Tensor>{randf({4, 6}, 4, -2.0, 2.0)}; }});
  c.push_back({"heaviside",
               [] { return seq(Input({5}), Dense(5), Step(), Dense(3, "step")); },
               [] { return std::vector<Tensor>{randf({6, 5}, 5)}; }});
  auto shapes_model = [] {
    return seq(Input({2, 3, 4}), Reshape({6, -1}), LayerNormalization({.axis = {-1}}),
               Reshape({4, 6}), LayerNormalization({.axis = {1, 2}}), Dense(5),
               BatchNormalization(), Flatten(), Softmax());
  };
  c.push_back({"shapes_and_norms", shapes_model,
               [] { return std::vector<Tensor>{randf({3, 2, 3, 4}, 6)}; }});
  c.push_back({"norms_opset16", shapes_model,
               [] { return std::vector<Tensor>{randf({3, 2, 3, 4}, 6)}; }, 16});
  c.push_back({"embedding",
               [] { return seq(Input({5}), Embedding(10, 4), Flatten(), Dense(2)); },
               [] {
                 return std::vector<Tensor>{
                     constant<std::int64_t>({0, 3, 9, 2, 2, 7, 1, 1, 0, 5}, Shape{2, 5})};
               }});
  c.push_back({"recurrent",
               [] {
                 return seq(Input({6, 3}), SimpleRNN(4, {.return_sequences = true}),
                            LSTM(5, {.return_sequences = true, .go_backwards = true}), GRU(4),
                            Dense(2));
               },
               [] { return std::vector<Tensor>{randf({3, 6, 3}, 7)}; }});
  c.push_back({"recurrent_variants",
               [] {
                 return seq(Input({5, 3}),
                            GRU(4, {.reset_after = false, .return_sequences = true}),
                            LSTM(3, {.activation = nn::relu, .return_sequences = true}),
                            SimpleRNN(3, {.activation = nn::relu, .go_backwards = true}));
               },
               [] { return std::vector<Tensor>{randf({2, 5, 3}, 8)}; }});
  c.push_back({"functional",
               [] {
                 auto in1 = Input({6});
                 auto in2 = Input({4});
                 auto a = nn::call(Dense(5, nn::relu), in1);
                 auto b = nn::call(Dense(5), in2);
                 auto s = nn::call(nn::Add(), {a, b})[0];
                 auto m = nn::call(Multiply(), {a, s})[0];
                 auto avg = nn::call(Average(), {m, b})[0];
                 auto cat = nn::call(Concatenate(), {a, avg})[0];
                 auto out = nn::call(Dense(2), cat);
                 return std::make_shared<Model>(std::vector<SymbolicTensor>{in1, in2},
                                                std::vector<SymbolicTensor>{out, s});
               },
               [] { return std::vector<Tensor>{randf({3, 6}, 9), randf({3, 4}, 10)}; }});
  c.push_back({"functional_states",
               [] {
                 auto x = Input({5, 3});
                 auto h0 = Input({4});
                 auto c0 = Input({4});
                 auto outs = nn::call(LSTM(4, {.return_state = true}), {x, h0, c0});
                 auto y = nn::call(Dense(2), outs[0]);
                 return std::make_shared<Model>(std::vector<SymbolicTensor>{x, h0, c0},
                                                std::vector<SymbolicTensor>{y, outs[1], outs[2]});
               },
               [] {
                 return std::vector<Tensor>{randf({2, 5, 3}, 11), randf({2, 4}, 12),
                                            randf({2, 4}, 13)};
               }});
  c.push_back({"nested",
               [] {
                 // A Sequential inside a functional model, inside a Sequential.
                 auto x = Input({3, 8, 8});
                 nn::ModuleRef block = std::make_shared<nn::Sequential>(
                     Conv2D(4, 3, {.padding = "same"}), nn::ReLU(), MaxPool2D(2));
                 auto h = nn::call(block, x);
                 auto y = nn::call(Flatten(), h);
                 nn::ModuleRef inner = std::make_shared<Model>(x, nn::call(Dense(5, nn::relu), y));
                 return seq(Input({3, 8, 8}), inner, Dense(2));
               },
               [] { return std::vector<Tensor>{randf({2, 3, 8, 8}, 14)}; }});
  return c;
}

std::vector<Tensor> run(nn::Model& m, const std::vector<Tensor>& x) {
  m.eval();
  if (x.size() == 1) {
    auto outs = m.call(x);
    return outs;
  }
  return m(x);
}

class OnnxRoundTrip : public ::testing::TestWithParam<int> {};

}  // namespace

TEST(Onnx, WithoutOnnxSupportTheErrorSaysSo) {
  if (onnx::available()) GTEST_SKIP() << "this build has ONNX support";
  nn::Sequential m{nn::Input({2}), nn::Dense(1)};
  EXPECT_NE(error_of([&] { onnx::export_model(m, "x.onnx"); }).find("built without ONNX"),
            std::string::npos);
  EXPECT_NE(error_of([&] { onnx::load("x.onnx"); }).find("built without ONNX"), std::string::npos);
}

TEST_P(OnnxRoundTrip, ImportedModelPredictsWhatTheExportedOnePredicts) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  set_seed(42);
  nn::reset_layer_name_counters();
  const Case c = cases()[std::size_t(GetParam())];
  SCOPED_TRACE(c.name);
  auto model = c.model();
  auto x = c.input();
  auto want = run(*model, x);
  const std::string bytes = onnx::export_to_bytes(*model, {.opset = c.opset});
  auto loaded = onnx::load_from_bytes(bytes);
  auto got = run(*loaded, x);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    EXPECT_TRUE(all_close(got[i], want[i], 1e-6, 1e-6)) << "output " << i;
  }
  // A different batch size runs too (the batch dimension is dynamic).
  std::vector<Tensor> x1;
  for (auto& t : x) x1.push_back(slice(t, {Slice{0, 1}}));
  auto got1 = run(*loaded, x1);
  auto want1 = run(*model, x1);
  EXPECT_TRUE(all_close(got1[0], want1[0], 1e-6, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(Layers, OnnxRoundTrip, ::testing::Range(0, int(cases().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return cases()[std::size_t(info.param)].name;
                         });

TEST(Onnx, EveryExportPassesTheOnnxChecker) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  std::vector<std::string> paths;
  for (auto& c : cases()) {
    set_seed(1);
    auto m = c.model();
    std::string p = (work_dir() / (c.name + ".onnx")).string();
    onnx::export_model(*m, p, {.opset = c.opset});
    paths.push_back(p);
  }
  std::string log;
  int rc = run_checker(paths, &log);
  if (rc == 77) GTEST_SKIP() << SOMA_ONNX_PYTHON " cannot import onnx: " << log;
  EXPECT_EQ(rc, 0) << log;
}

TEST(Onnx, ExportWritesAFileThatLoadsBack) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  nn::Sequential m{nn::Input({3}), nn::Dense(2)};
  std::string p = (work_dir() / "file.onnx").string();
  onnx::export_model(m, p);
  auto loaded = onnx::load(p);
  Tensor x = randf({4, 3}, 20);
  EXPECT_TRUE(all_close((*loaded)(x), m(x), 1e-6, 1e-6));
  EXPECT_EQ(loaded->type_name(), "OnnxModel");
}

TEST(Onnx, ImportedWeightsAreTrainableAndStatisticsAreNot) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::BatchNormalization(), nn::Dense(2)};
  auto loaded = onnx::load_from_bytes(onnx::export_to_bytes(m));
  // kernel+bias, gamma+beta, kernel+bias trainable; moving mean/variance not.
  EXPECT_EQ(loaded->trainable_parameters().size(), 6u);
  EXPECT_EQ(loaded->non_trainable_parameters().size(), 2u);
  EXPECT_EQ(loaded->count_params(), m.count_params());
  auto frozen = onnx::load_from_bytes(onnx::export_to_bytes(m), {.trainable = false});
  EXPECT_EQ(frozen->trainable_parameters().size(), 0u);
}

TEST(Onnx, ImportedModelFineTunesWithFit) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  set_seed(3);
  nn::Sequential m{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(3)};
  auto loaded = onnx::load_from_bytes(onnx::export_to_bytes(m));
  Tensor x = randf({32, 4}, 30);
  Tensor y = cast(argmax(x, 1), DType::i64);  // 4 features -> classes 0..3, head of 3: use % below
  y = mod(y, scalar(3.0, DType::i64));
  loaded->compile(optim::Adam({.learning_rate = 0.05}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
  auto h = loaded->fit(x, y, {.epochs = 15, .batch_size = 8, .verbose = 0, .seed = 1});
  EXPECT_LT(h["loss"].back(), 0.7 * h["loss"].front());
}

TEST(Onnx, ImportedCnnTrainsWithAGradientTape) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  set_seed(4);
  nn::Sequential m{nn::Input({1, 6, 6}), nn::Conv2D(3, 3, {.activation = nn::relu}),
                   nn::MaxPool2D(2), nn::Flatten(), nn::Dense(1)};
  auto loaded = onnx::load_from_bytes(onnx::export_to_bytes(m));
  Tensor x = randf({8, 1, 6, 6}, 40);
  Tensor y = randf({8, 1}, 41);
  optim::SGD opt({.learning_rate = 0.05});
  auto vars = loaded->trainable_parameters();
  auto loss_of = [&] { return mean(square((*loaded)(x) - y)); };
  const double before = loss_of().item<double>();
  for (int step = 0; step < 10; ++step) {
    GradientTape tape;
    Tensor loss = loss_of();
    opt.apply_gradients(tape.gradient(loss, vars), vars);
  }
  EXPECT_LT(loss_of().item<double>(), before);
}

TEST(Onnx, UnsupportedOperatorIsAnErrorNamingItAndItsNode) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  nn::Sequential m{nn::Input({3}), nn::Dense(2, nn::relu)};
  m.layers()[0]->set_name("dense");
  std::string bytes = onnx::export_to_bytes(m);
  // "Relu" -> "Relx": same length, so the protobuf stays well formed.
  for (std::size_t p = bytes.find("Relu"); p != std::string::npos; p = bytes.find("Relu", p))
    bytes[p + 3] = 'x';
  std::string msg = error_of([&] { onnx::load_from_bytes(bytes); });
  EXPECT_NE(msg.find("operator 'Relx' is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'dense/Relx'"), std::string::npos) << msg;
}

TEST(Onnx, LoadErrorsNameTheProblem) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  EXPECT_NE(error_of([] { onnx::load("/nonexistent/model.onnx"); }).find("cannot open"),
            std::string::npos);
  std::string p = (work_dir() / "garbage.onnx").string();
  std::ofstream(p) << "\xff\xff\xff not a protobuf";
  EXPECT_NE(error_of([&] { onnx::load(p); }).find("is not an ONNX model"), std::string::npos);
  nn::Sequential m{nn::Input({3}), nn::Dense(2)};
  auto loaded = onnx::load_from_bytes(onnx::export_to_bytes(m));
  std::string msg = error_of([&] { (*loaded)(randf({2, 4}, 1)); });
  EXPECT_NE(msg.find("input 'input' expects shape [?, 3], got [2, 4]"), std::string::npos) << msg;
}

TEST(Onnx, ExportErrorsNameTheProblem) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  nn::Sequential unbuilt{nn::Dense(2)};
  EXPECT_NE(error_of([&] { onnx::export_to_bytes(unbuilt); }).find("is not built"),
            std::string::npos);
  nn::Sequential m{nn::Input({3}), nn::Dense(2)};
  EXPECT_NE(error_of([&] { onnx::export_to_bytes(m, {.opset = 10}); })
                .find("opset 10 is not supported; soma writes opsets 11 to 21"),
            std::string::npos);
  EXPECT_NE(error_of([&] { onnx::export_to_bytes(m, {.opset = 22}); })
                .find("opset 22 is not supported; soma writes opsets 11 to 21"),
            std::string::npos);
  nn::Sequential custom{nn::Input({3}),
                        nn::ActivationLayer(nn::Activation("cube", [](const Tensor& t) {
                          return t * t * t;
                        }))};
  std::string msg = error_of([&] { onnx::export_to_bytes(custom); });
  EXPECT_NE(msg.find("activation 'cube' has no ONNX mapping"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { onnx::export_model(m, "/nonexistent/dir/m.onnx"); }).find("cannot open"),
            std::string::npos);
}

TEST(Onnx, AFineTunedImportExportsItsGraphWithTheNewWeights) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  set_seed(6);
  nn::Sequential m{nn::Input({4}), nn::Dense(8, nn::tanh), nn::BatchNormalization(), nn::Dense(2)};
  perturb_batch_norms(m, 3);
  auto loaded = onnx::load_from_bytes(onnx::export_to_bytes(m));
  Tensor x = randf({16, 4}, 50), y = randf({16, 2}, 51);
  loaded->compile(optim::Adam({.learning_rate = 0.05}), nn::MeanSquaredError());
  loaded->fit(x, y, {.epochs = 3, .batch_size = 8, .verbose = 0});
  loaded->eval();
  Tensor tuned = (*loaded)(x);
  EXPECT_FALSE(all_close(tuned, m(x), 1e-3, 1e-3));  // fine-tuning changed the predictions
  std::string p = (work_dir() / "fine_tuned.onnx").string();
  onnx::export_model(*loaded, p);
  auto again = onnx::load(p);
  EXPECT_TRUE(all_close((*again)(x), tuned, 1e-6, 1e-6));
}
