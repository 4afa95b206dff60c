// conv1d (conv2d over a height-1 image) against a naive loop for strides, dilation, padding
// and groups; its gradients vs finite differences; the Conv1D layer's forward, shape rule,
// config, model file and ONNX export (Conv with a 1-d kernel) round trips.
#include <cstdio>
#include <string>

#include "error_testing.hpp"
#include "soma/onnx.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

// x [N, C, W], w [O, C/g, K]; pads left/right explicit.
std::vector<double> naive_conv1d(const Tensor& x, const Tensor& w, std::int64_t s,
                                 std::int64_t pl, std::int64_t pr, std::int64_t d,
                                 std::int64_t g, Shape* out_shape) {
  const std::int64_t n = x.dim(0), c = x.dim(1), wd = x.dim(2), o = w.dim(0), k = w.dim(2);
  const std::int64_t wo = (wd + pl + pr - d * (k - 1) - 1) / s + 1;
  *out_shape = {n, o, wo};
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), y;
  const std::int64_t cg = c / g, og = o / g;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t i = 0; i < wo; ++i) {
        double acc = 0;
        const std::int64_t grp = oc / og;
        for (std::int64_t ci = 0; ci < cg; ++ci)
          for (std::int64_t j = 0; j < k; ++j) {
            const std::int64_t pos = i * s + j * d - pl;
            if (pos < 0 || pos >= wd) continue;
            acc += xv[std::size_t((b * c + grp * cg + ci) * wd + pos)] *
                   wv[std::size_t((oc * cg + ci) * k + j)];
          }
        y.push_back(acc);
      }
  return y;
}

TEST(Conv1d, MatchesANaiveLoop) {
  struct Case {
    std::int64_t c, o, wd, k, s, d, g, pl, pr;
    Padding pad;
  };
  const Case cases[] = {
      {3, 4, 10, 3, 1, 1, 1, 0, 0, "valid"},
      {2, 4, 11, 3, 2, 1, 1, 1, 1, 1},
      {4, 6, 9, 2, 1, 2, 2, 0, 0, "valid"},
      {2, 3, 8, 4, 1, 1, 1, 1, 2, "same"},  // TensorFlow's rule: the odd extra on the right
      {1, 2, 7, 3, 3, 1, 1, 2, 0, Padding(0, 0, 2, 0)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("k=" + std::to_string(c.k) + " s=" + std::to_string(c.s) + " pad=" + c.pad.str());
    Tensor x = rand_tensor({2, c.c, c.wd}, 1), w = rand_tensor({c.o, c.c / c.g, c.k}, 2);
    Shape shape;
    auto want = naive_conv1d(x, w, c.s, c.pl, c.pr, c.d, c.g, &shape);
    Tensor y = conv1d(x, w, c.s, c.pad, c.d, c.g);
    ASSERT_EQ(y.shape(), shape);
    EXPECT_TRUE(all_close(y, want, 1e-12, 1e-12));
    EXPECT_TRUE(all_close(conv1d(cast(x, DType::f32), cast(w, DType::f32), c.s, c.pad, c.d, c.g),
                          want, 1e-5, 1e-5));
  }
  EXPECT_NE(soma::testing::error_of([] { conv1d(ones({2, 3, 4, 5}), ones({1, 3, 2})); }).find("conv1d"),
            std::string::npos);
}

TEST(Conv1d, GradientsMatchFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], 2, 1, 1, 1); },
      {rand_tensor({2, 3, 9}, 3), rand_tensor({4, 3, 3}, 4)}));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], 1, "same", 2, 2); },
      {rand_tensor({1, 4, 8}, 5), rand_tensor({2, 2, 3}, 6)}));
}

std::shared_ptr<nn::Sequential> small_model() {
  auto m = std::make_shared<nn::Sequential>(
      nn::Input({3, 12}),
      nn::Conv1D(4, 3, {.strides = 2, .padding = "same", .activation = nn::relu}),
      nn::Conv1D(2, 2, {.padding = 1, .dilation_rate = 2}), nn::Flatten(), nn::Dense(3));
  return m;
}

TEST(Conv1DLayer, ForwardIsConv1dPlusBias) {
  nn::Conv1D layer(5, 3, {.strides = 1, .padding = "valid"});
  Tensor x = rand_tensor({2, 4, 10}, 7, -1, 1, DType::f32);
  Tensor y = layer(x);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(layer.kernel().shape(), (Shape{5, 4, 3}));
  Tensor want = conv1d(x, layer.kernel().value()) + reshape(layer.bias().value(), {1, 5, 1});
  EXPECT_TRUE(all_close(y, want, 0, 0));
  EXPECT_EQ(layer.output_shape({7, 4, 10}), (Shape{7, 5, 8}));
  EXPECT_NE(soma::testing::error_of([&] { layer(rand_tensor({2, 3, 10}, 8, -1, 1, DType::f32)); })
                .find("built for 4 input channels"),
            std::string::npos);
  EXPECT_NE(soma::testing::error_of([] { nn::Conv1D(4, 0); }).find("kernel_size"), std::string::npos);
}

TEST(Conv1DLayer, ConfigAndModelFileRoundTrip) {
  nn::Conv1D layer(4, 5, {.strides = 2, .padding = "same", .dilation_rate = 1, .groups = 2,
                          .activation = nn::relu, .use_bias = false});
  const std::string cfg = serialization::layer_config(layer);
  EXPECT_NE(cfg.find("\"class_name\":\"Conv1D\""), std::string::npos) << cfg;
  EXPECT_EQ(serialization::layer_config(*serialization::layer_from_config(cfg)), cfg);

  auto m = small_model();
  Tensor x = rand_tensor({2, 3, 12}, 9, -1, 1, DType::f32);
  Tensor before = (*m)(x);
  const std::string path = ::testing::TempDir() + "conv1d_model.soma";
  m->save(path);
  auto back = load_model(path);
  std::remove(path.c_str());
  EXPECT_TRUE(all_close((*back)(x), before, 0, 0));
}

TEST(Conv1DLayer, OnnxExportAsA1dConvImportsBack) {
  if (!soma::onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  auto m = small_model();
  Tensor x = rand_tensor({2, 3, 12}, 10, -1, 1, DType::f32);
  Tensor want = (*m)(x);
  const std::string bytes = soma::onnx::export_to_bytes(*m);
  EXPECT_NE(bytes.find("Conv"), std::string::npos);
  auto back = soma::onnx::load_from_bytes(bytes);
  back->eval();
  EXPECT_TRUE(all_close(back->call({x})[0], want, 1e-6, 1e-5));
}

// PyTorch's Conv1d (python3-torch) on fixed weights: stride, padding, dilation, groups, bias.
TEST(Conv1DLayer, MatchesPyTorchConv1d) {
  const char* script = R"PY(
import sys
try:
    import torch
except Exception:
    sys.exit(77)
torch.manual_seed(1)
out = open(sys.argv[1], 'w')
def w(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(name + " " + str(t.dim()) + " " + " ".join(str(d) for d in t.shape) + " " +
              " ".join(repr(float(v)) for v in t.flatten()) + "\n")
conv = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2).double()
x = torch.rand(2, 4, 13, dtype=torch.float64)
w("x", x); w("w", conv.weight); w("b", conv.bias); w("y", conv(x))
)PY";
  auto run = soma::testing::run_torch_script(script, "conv1d");
  if (run.unavailable()) GTEST_SKIP() << "no python3 with torch: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  auto& t = run.t;
  nn::Conv1D layer(6, 3, {.strides = 2, .padding = 1, .dilation_rate = 2, .groups = 2,
                          .dtype = DType::f64});
  layer.build_for({2, 4, 13});
  layer.load_state_dict({{"kernel", t["w"]}, {"bias", t["b"]}});
  EXPECT_TRUE(all_close(layer(t["x"]), t["y"], 1e-12, 1e-12));
}

}  // namespace
