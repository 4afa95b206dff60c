// Export at every opset soma writes (11 to 21): each model of the list below is exported at each
// opset, must pass onnx.checker.check_model(full_check=True) and run in onnxruntime with outputs
// equal to soma's within 1e-5 (tests/onnx/ort_run.py, run in the pinned oracle environment:
// PyPI's onnx and onnxruntime). Skips when they cannot be imported. Prints the opset x model matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

#ifndef SOMA_ONNX_SCRIPTS
#define SOMA_ONNX_SCRIPTS "tests/onnx"
#endif
#ifndef SOMA_ORT_PYTHON
#define SOMA_ORT_PYTHON SOMA_ORACLE_PYTHON
#endif

using namespace soma;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kFirstOpset = 11, kLastOpset = 21;

struct Case {
  std::string name;
  std::function<std::shared_ptr<nn::Model>()> model;
  std::function<std::vector<Tensor>()> input;
  // Below this opset the export must be refused with an error naming the opset it needs.
  std::int64_t min_opset = 11;
};

Tensor randf(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return soma::testing::rand_tensor(s, seed, lo, hi).cast(DType::f32);
}

// Non-default BatchNormalization statistics, so that the export must carry them.
void perturb_batch_norms(nn::Module& m, std::uint64_t seed) {
  NoGradScope no_grad;
  for (auto& [name, v] : m.named_parameters()) {
    Variable var = v;
    if (name.find("moving_mean") != std::string::npos) var.assign(randf(v.shape(), seed++, -0.5, 0.5));
    if (name.find("moving_variance") != std::string::npos) var.assign(randf(v.shape(), seed++, 0.5, 1.5));
  }
}

template <class... L>
std::shared_ptr<nn::Model> seq(L&&... layers) {
  auto m = std::make_shared<nn::Sequential>(std::forward<L>(layers)...);
  perturb_batch_norms(*m, 7);
  return m;
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// Every layer type that exports, in example-like models.
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
               [] { return one(randf({5, 8}, 1)); }});
  c.push_back({"cnn",
               [] {
                 return seq(Input({2, 9, 9}), Conv2D(4, 3, {.padding = "same", .activation = nn::relu}),
                            BatchNormalization({.axis = 1}), MaxPool2D(2), Dropout(0.25),
                            Conv2D(6, {2, 3}, {.strides = 2, .padding = "same"}),
                            AvgPool2D(2, Size2(1), "same"), GlobalAveragePooling2D(), Dense(3));
               },
               [] { return one(randf({3, 2, 9, 9}, 2)); }});
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
               [] { return one(randf({2, 4, 7, 7}, 3)); }});
  c.push_back({"cnn3d",
               [] {
                 return seq(Input({2, 5, 6, 5}),
                            nn::Conv3D(4, 3, {.padding = "same", .activation = nn::relu}),
                            nn::MaxPool3D({2, 2, 2}, nn::Size3{1, 2, 2}, "same"),
                            nn::Conv3D(4, {2, 3, 2}, {.strides = {1, 2, 1}, .groups = 2}),
                            nn::AvgPool3D({2, 1, 2}, nn::Size3{1}, "same"),
                            nn::GlobalAveragePooling3D(), Dense(3));
               },
               [] { return one(randf({2, 2, 5, 6, 5}, 7)); }});
  c.push_back({"activations",
               [] {
                 return seq(Input({6}), Dense(6, "leaky_relu"), LeakyReLU(0.1), Dense(6, "elu"),
                            ELU(0.5), Dense(6, "gelu"), GELU(true), Dense(6, "swish"),
                            Dense(6, "softplus"), Dense(6, "sigmoid"), Sigmoid(), Tanh(), ReLU(),
                            Dense(6, "log_softmax"), Softmax());
               },
               [] { return one(randf({4, 6}, 4, -2.0, 2.0)); }});
  c.push_back({"heaviside", [] { return seq(Input({5}), Dense(5), Step(), Dense(3, "step")); },
               [] { return one(randf({6, 5}, 5)); }});
  c.push_back({"norms",
               [] {
                 return seq(Input({2, 3, 4}), Reshape({6, -1}), LayerNormalization({.axis = {-1}}),
                            Reshape({4, 6}), LayerNormalization({.axis = {1, 2}}),
                            LayerNormalization({.axis = {1}}), Dense(5),
                            BatchNormalization(), Flatten(), Softmax());
               },
               [] { return one(randf({3, 2, 3, 4}, 6)); }});
  c.push_back({"preprocessing",
               [] {
                 nn::Normalization norm({.axis = Axes{1}});
                 norm.adapt(randf({10, 3, 4}, 20, -3.0, 5.0));
                 nn::Normalization inv({.mean = {1.5}, .variance = {4.0}, .invert = true});
                 return seq(Input({3, 4}), std::move(norm), Flatten(), Dense(4), std::move(inv));
               },
               [] { return one(randf({2, 3, 4}, 21, -3.0, 5.0)); }});
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
               [] { return one(randf({2, 3, 8, 8}, 22)); }});
  c.push_back({"embedding",
               [] { return seq(Input({5}), Embedding(10, 4), Flatten(), Dense(2)); },
               [] { return one(constant<std::int64_t>({0, 3, 9, 2, 2, 7, 1, 1, 0, 5}, Shape{2, 5})); }});
  c.push_back({"lstm_gru",
               [] {
                 return seq(Input({6, 3}), SimpleRNN(4, {.return_sequences = true}),
                            LSTM(5, {.return_sequences = true, .go_backwards = true}), GRU(4),
                            Dense(2));
               },
               [] { return one(randf({3, 6, 3}, 7)); }});
  c.push_back({"recurrent_variants",
               [] {
                 return seq(Input({5, 3}), GRU(4, {.reset_after = false, .return_sequences = true}),
                            LSTM(3, {.activation = nn::relu, .return_sequences = true}),
                            SimpleRNN(3, {.activation = nn::relu, .go_backwards = true}));
               },
               [] { return one(randf({2, 5, 3}, 8)); }});
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
  c.push_back({"lstm_states",
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
                 return std::vector<Tensor>{randf({2, 5, 3}, 11), randf({2, 4}, 12), randf({2, 4}, 13)};
               }});
  c.push_back({"attention",
               [] {
                 auto x = Input({6, 8});
                 auto h = nn::call(nn::MultiHeadAttention(2, 4, {.use_causal_mask = true}), x);
                 auto s = nn::call(nn::Add(), {x, h})[0];
                 auto n = nn::call(LayerNormalization({.axis = {-1}}), s);
                 auto y = nn::call(Dense(3, "gelu"), n);
                 return std::make_shared<Model>(x, y);
               },
               // The causal mask is written with Trilu (opset 14; docs/onnx.md).
               [] { return one(randf({2, 6, 8}, 14)); }, 14});
  return c;
}

// "name rank dims values" lines: the format of torch_script.hpp, which the script reads too.
void write_tensor(std::ostream& os, const std::string& name, const Tensor& t) {
  Tensor d = t.cast(DType::f64).contiguous();
  os << name << (t.dtype() == DType::i64 ? ".i64" : "") << " " << t.shape().size();
  for (auto e : t.shape()) os << " " << e;
  os << std::setprecision(17);
  for (std::int64_t i = 0; i < d.numel(); ++i) os << " " << d.data<double>()[i];
  os << "\n";
}

}  // namespace

TEST(OnnxExportOrt, EveryOpsetPassesTheCheckerAndRunsInOnnxruntime) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  const fs::path dir = fs::temp_directory_path() / ("soma_ort_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto list = cases();
  // (model, opset) -> soma's outputs by graph output name; or the export error.
  std::map<std::string, std::map<std::string, Tensor>> want;
  std::map<std::string, std::string> export_error;
  for (const Case& c : list) {
    set_seed(42);
    nn::reset_layer_name_counters();
    auto model = c.model();
    auto x = c.input();
    model->eval();
    auto y = x.size() == 1 ? model->call(x) : (*model)(x);
    std::ofstream in(dir / (c.name + ".in.txt"));
    for (std::size_t i = 0; i < x.size(); ++i)
      write_tensor(in, x.size() == 1 ? "input" : "input_" + std::to_string(i + 1), x[i]);
    for (std::int64_t op = kFirstOpset; op <= kLastOpset; ++op) {
      const std::string tag = c.name + "_op" + std::to_string(op);
      try {
        onnx::export_model(*model, (dir / (tag + ".onnx")).string(), {.opset = op});
      } catch (const Error& e) {
        export_error[tag] = e.what();
        continue;
      }
      if (op < c.min_opset) export_error[tag] = "exported, but it needs opset " + std::to_string(c.min_opset);
      for (std::size_t i = 0; i < y.size(); ++i)
        want[tag][y.size() == 1 ? "output" : "output_" + std::to_string(i + 1)] = y[i];
    }
  }
  const std::string script = fs::absolute(fs::path(SOMA_ONNX_SCRIPTS) / "ort_run.py").string();
  const std::string runner = "import runpy, sys\nsys.argv = ['" + script + "', sys.argv[1], '" +
                             dir.string() + "']\nrunpy.run_path(sys.argv[0], run_name='__main__')\n";
  auto run = soma::testing::run_torch_script(runner.c_str(), "ort", SOMA_ORT_PYTHON);
  fs::remove_all(dir);
  if (run.unavailable()) GTEST_SKIP() << "onnx/onnxruntime not importable: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  // The failures the script printed, by model tag.
  std::map<std::string, std::string> failed;
  std::istringstream log(run.log);
  for (std::string line; std::getline(log, line);)
    if (line.rfind("FAIL ", 0) == 0) {
      auto colon = line.find(':');
      failed[line.substr(5, colon - 5)] = line.substr(colon + 2);
    }
  std::ostringstream matrix;
  matrix << std::left << std::setw(20) << "model \\ opset";
  for (std::int64_t op = kFirstOpset; op <= kLastOpset; ++op) matrix << std::setw(5) << op;
  matrix << "\n";
  int passed = 0, total = 0;
  double worst = 0;
  for (const Case& c : list) {
    matrix << std::setw(20) << c.name;
    for (std::int64_t op = kFirstOpset; op <= kLastOpset; ++op) {
      const std::string tag = c.name + "_op" + std::to_string(op);
      ++total;
      bool ok = false;
      if (op < c.min_opset) {
        const std::string& e = export_error[tag];
        ok = e.find("opset") != std::string::npos && e.find("exported, but") == std::string::npos;
        if (!ok) ADD_FAILURE() << tag << ": expected a refusal naming the opset, got: " << e;
        passed += ok;
        matrix << std::setw(5) << (ok ? "n/a" : "FAIL");
        continue;
      } else if (export_error.count(tag)) {
        ADD_FAILURE() << tag << ": export failed: " << export_error[tag];
      } else if (failed.count(tag)) {
        ADD_FAILURE() << tag << ": " << failed[tag];
      } else {
        ok = true;
        for (auto& [name, t] : want[tag]) {
          auto it = run.t.find(tag + ":" + name);
          if (it == run.t.end()) {
            ADD_FAILURE() << tag << ": onnxruntime gave no output '" << name << "'";
            ok = false;
            continue;
          }
          Tensor got = it->second;
          Tensor w = t.cast(DType::f64);
          if (got.shape() != w.shape()) {
            ADD_FAILURE() << tag << ":" << name << ": onnxruntime's shape " << shape_str(got.shape())
                          << ", soma's " << shape_str(w.shape());
            ok = false;
            continue;
          }
          const double diff = max(abs(subtract(got, w))).item<double>();
          worst = std::max(worst, diff);
          if (!(diff <= 1e-5)) {
            ADD_FAILURE() << tag << ":" << name << ": max |onnxruntime - soma| = " << diff;
            ok = false;
          }
        }
      }
      passed += ok;
      matrix << std::setw(5) << (ok ? "ok" : "FAIL");
    }
    matrix << "\n";
  }
  std::printf("%s%d of %d exports pass; largest |onnxruntime - soma| %.3g\n", matrix.str().c_str(),
              passed, total, worst);
}

// Before opset 13 ONNX's Softmax flattens the input from its axis: only the last axis exports.
TEST(OnnxExportOrt, SoftmaxOverAnotherAxisNeedsOpset13) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  nn::Sequential m{nn::Input({3, 4}), nn::Softmax(1)};
  std::string msg;
  try {
    onnx::export_to_bytes(m, {.opset = 12});
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("needs opset 13 or later"), std::string::npos) << msg;
  auto back = onnx::load_from_bytes(onnx::export_to_bytes(m, {.opset = 13}));
  Tensor x = randf({2, 3, 4}, 30);
  EXPECT_TRUE(soma::testing::all_close((*back)(x), m(x), 1e-6, 1e-6));
}
