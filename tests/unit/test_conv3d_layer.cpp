// The Conv3D layer and the 3-d / global pooling layers (MaxPool3D, AvgPool3D,
// GlobalAveragePooling3D, GlobalMaxPooling2D/1D): against PyTorch on fixed weights (skips without
// python3-torch), gradients vs finite differences in f64, errors that name the layer and the
// shapes, channels_last, Keras JSON, and ONNX export (Conv/MaxPool/AveragePool with 3 spatial
// axes) imported back.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "../../src/backend/cpu/onednn_conv.hpp"
#include "../onnx/model_bytes.hpp"
#include "error_testing.hpp"
#include "soma/cuda.hpp"
#include "soma/model/keras.hpp"
#include "soma/onnx.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::error_of;
using soma::testing::rand_tensor;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Tape gradients of L = sum(f() * r) w.r.t. each variable vs central differences (the variable
// assigned perturbed values).
::testing::AssertionResult weight_gradients_match(const std::function<Tensor()>& f,
                                                  const std::vector<Variable>& params) {
  const double eps = 1e-6, tol = 1e-5;
  std::vector<Tensor> grads;
  Tensor r;
  {
    GradientTape tape;
    Tensor y = f();
    r = rand_tensor(y.shape(), 99, -1.0, 1.0, y.dtype());
    grads = tape.gradient(sum(y * r), params, UnconnectedGradients::Zero);
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    Variable v = params[k];
    const std::vector<double> orig = v.value().to_vector<double>(), g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < orig.size(); ++j) {
      auto loss_at = [&](double d) {
        std::vector<double> p = orig;
        p[j] += d;
        v.assign(constant(p, v.shape()));
        return sum(f() * r).item<double>();
      };
      const double num = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      v.assign(constant(orig, v.shape()));
      if (std::abs(num - g[j]) > tol * (1.0 + std::abs(num)))
        return ::testing::AssertionFailure() << "'" << v.name() << "' element " << j << ": tape "
                                             << g[j] << " vs finite difference " << num;
    }
  }
  return ::testing::AssertionSuccess();
}

const char* kTorchHeader = R"PY(
import sys
try:
    import torch
    import torch.nn.functional as F
except Exception:
    sys.exit(77)
torch.manual_seed(3)
out = open(sys.argv[1], 'w')
def w(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(name + " " + str(t.dim()) + " " + " ".join(str(d) for d in t.shape) + " " +
              " ".join(repr(float(v)) for v in t.flatten()) + "\n")
)PY";

TEST(Conv3DLayer, MatchesPyTorchConv3dAndPooling) {
  const std::string script = std::string(kTorchHeader) + R"PY(
x = torch.rand(2, 4, 5, 7, 6, dtype=torch.float64) * 2 - 1
w("x", x)
a = torch.nn.Conv3d(4, 6, (2, 3, 2), stride=(1, 2, 1), dilation=(2, 1, 1), groups=2).double()
w("a_w", a.weight); w("a_b", a.bias); w("a_y", a(x))
b = torch.nn.Conv3d(4, 3, 3, padding=1, bias=False).double()  # = "same" for an odd kernel, stride 1
w("b_w", b.weight); w("b_y", torch.relu(b(x)))
w("max", F.max_pool3d(x, (2, 3, 2), stride=(2, 2, 1)))
xs = x[:, :, :, :, :5]  # D, H, W = 5, 7, 5: TensorFlow's "same" pads 1 on both sides, as torch
w("max_same", F.max_pool3d(xs, 3, stride=2, padding=1))
w("avg", F.avg_pool3d(x, (3, 2, 2), stride=(1, 2, 2)))
w("avg_same", F.avg_pool3d(xs, 3, stride=2, padding=1, count_include_pad=False))
)PY";
  auto run = soma::testing::run_torch_script(script.c_str(), "conv3d_layer");
  if (run.unavailable()) GTEST_SKIP() << "no python3 with torch: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  auto& t = run.t;
  const Tensor x = t["x"];
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    const Tensor xd = cast(x, dt);
    const Tensor xs = contiguous(slice(xd, {Slice{}, Slice{}, Slice{}, Slice{}, Slice{0, 5, 1}}));
    nn::Conv3D a(6, {2, 3, 2}, {.strides = {1, 2, 1}, .dilation_rate = {2, 1, 1}, .groups = 2, .dtype = dt});
    a.build_for(x.shape());
    a.load_state_dict({{"kernel", cast(t["a_w"], dt)}, {"bias", cast(t["a_b"], dt)}});
    EXPECT_TRUE(all_close(a(xd), t["a_y"], tol, tol));
    nn::Conv3D b(3, 3, {.padding = "same", .activation = nn::relu, .use_bias = false, .dtype = dt});
    b.build_for(x.shape());
    b.load_state_dict({{"kernel", cast(t["b_w"], dt)}});
    EXPECT_TRUE(all_close(b(xd), t["b_y"], tol, tol));
    // channels_last: the same numbers, NDHWC in and out.
    nn::Conv3D bl(3, 3, {.padding = "same", .activation = nn::relu, .use_bias = false, .dtype = dt,
                         .data_format = nn::DataFormat::channels_last});
    const Tensor xl = contiguous(transpose(xd, {0, 2, 3, 4, 1}));
    bl.build_for(xl.shape());
    bl.load_state_dict({{"kernel", cast(t["b_w"], dt)}});
    EXPECT_TRUE(all_close(bl(xl), transpose(t["b_y"], {0, 2, 3, 4, 1}), tol, tol));

    EXPECT_TRUE(all_close(nn::MaxPool3D({2, 3, 2}, nn::Size3{2, 2, 1})(xd), t["max"], tol, tol));
    EXPECT_TRUE(all_close(nn::MaxPool3D({3}, nn::Size3{2}, "same")(xs), t["max_same"], tol, tol));
    EXPECT_TRUE(all_close(nn::AvgPool3D({3, 2, 2}, nn::Size3{1, 2, 2})(xd), t["avg"], tol, tol));
    EXPECT_TRUE(all_close(nn::AvgPool3D({3}, nn::Size3{2}, "same")(xs), t["avg_same"], tol, tol));
    EXPECT_TRUE(all_close(nn::AvgPool3D({3}, nn::Size3{2}, "same", nn::DataFormat::channels_last)(
                              contiguous(transpose(xs, {0, 2, 3, 4, 1}))),
                          transpose(t["avg_same"], {0, 2, 3, 4, 1}), tol, tol));
  }
}

// "same" with uneven padding (the odd unit at the end, TensorFlow's rule) against a naive loop
// that averages / maxes the real elements of each window.
TEST(Pool3DLayer, SameWithUnevenPaddingMatchesANaiveLoop) {
  const Tensor x = rand_tensor({1, 2, 4, 5, 3}, 5);
  const std::int64_t k = 2, s = 1;  // per axis: out = in, one unit of padding at the end
  std::vector<double> xs = x.to_vector<double>(), want_max, want_avg;
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t d = 0; d < 4; ++d)
      for (std::int64_t h = 0; h < 5; ++h)
        for (std::int64_t w = 0; w < 3; ++w) {
          double m = -INFINITY, acc = 0, n = 0;
          for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t j = 0; j < k; ++j)
              for (std::int64_t l = 0; l < k; ++l) {
                const std::int64_t dd = d * s + i, hh = h * s + j, ww = w * s + l;
                if (dd >= 4 || hh >= 5 || ww >= 3) continue;
                const double v = xs[std::size_t(((c * 4 + dd) * 5 + hh) * 3 + ww)];
                m = std::max(m, v);
                acc += v;
                n += 1;
              }
          want_max.push_back(m);
          want_avg.push_back(acc / n);
        }
  EXPECT_TRUE(all_close(nn::MaxPool3D({k}, nn::Size3{s}, "same")(x), want_max, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(nn::AvgPool3D({k}, nn::Size3{s}, "same")(x), want_avg, 1e-12, 1e-12));
}

// The conv3d ops' CPU kernel: oneDNN's 3-d primitives for packed f32, else the composite
// (conv2d over the depth taps folded into channels; SOMA_CONV_IMPL=im2col forces it). The two
// agree on forward, input gradient and kernel gradient (strided, padded, dilated, grouped, and
// with a strided input view).
TEST(Conv3dOp, OneDnnPrimitivesMatchTheComposite) {
  struct Case {
    Shape x, w;
    std::array<std::int64_t, 3> s;
    std::array<std::int64_t, 6> p;
    std::array<std::int64_t, 3> d;
    std::int64_t groups;
  };
  const Case cases[] = {
      {{2, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 1},
      {{1, 4, 6, 5, 6}, {6, 2, 2, 3, 2}, {2, 1, 2}, {1, 0, 0, 2, 1, 1}, {2, 1, 1}, 2},
      {{3, 2, 4, 4, 5}, {2, 2, 1, 2, 3}, {1, 2, 1}, {0, 0, 0, 0, 0, 0}, {1, 1, 2}, 1},
  };
  auto passes = [](const Case& c, const Tensor& x, const Tensor& w) {
    Variable xv(x), wv(w);
    GradientTape tape;
    Tensor y = conv3d(xv.value(), wv.value(), c.s, c.p, c.d, c.groups);
    // A strided upstream gradient (a broadcast), as the gradient of a sum arrives.
    auto g = tape.gradient(sum(y * rand_tensor({y.dim(0), y.dim(1), 1, 1, 1}, 7, -1, 1, DType::f32)),
                           std::vector<Variable>{xv, wv});
    return std::vector<Tensor>{y, g[0], g[1]};
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const Tensor x = rand_tensor(c.x, 1, -1, 1, DType::f32), w = rand_tensor(c.w, 2, -1, 1, DType::f32);
    const std::uint64_t calls = detail::onednn_conv3d_calls();
    const auto fast = passes(c, x, w);
    if (detail::onednn_conv_built())  // forward, backward data, backward weights
      EXPECT_EQ(detail::onednn_conv3d_calls() - calls, 3u);
    const detail::ConvImpl before = detail::conv_impl();
    detail::set_conv_impl(detail::ConvImpl::im2col);
    const auto composite = passes(c, x, w);
    detail::set_conv_impl(before);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(fast[std::size_t(i)], composite[std::size_t(i)], 1e-5, 1e-5)) << i;
    // A strided view of x runs too.
    const Tensor xs = slice(concat({x, x}, 4), {Slice{}, Slice{}, Slice{}, Slice{}, Slice{0, std::nullopt, 2}});
    EXPECT_TRUE(all_close(conv3d(xs, w, c.s, c.p, c.d, c.groups),
                          conv3d(contiguous(xs), w, c.s, c.p, c.d, c.groups), 1e-6, 1e-6));
  }
}

// The CUDA kernels (cuDNN's N-d convolution for one padding per axis, the composite for uneven
// padding) against the CPU: forward and both gradients, f32 and f64. Needs a GPU.
TEST(Conv3dOp, CudaMatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  const Device gpu = Device::cuda(0);
  struct Case {
    Shape x, w;
    std::array<std::int64_t, 3> s;
    std::array<std::int64_t, 6> p;
    std::array<std::int64_t, 3> d;
    std::int64_t groups;
  };
  const Case cases[] = {
      {{2, 4, 5, 6, 7}, {6, 2, 3, 3, 3}, {1, 2, 1}, {1, 1, 0, 0, 2, 2}, {1, 1, 2}, 2},  // cuDNN
      {{1, 3, 4, 5, 6}, {2, 3, 2, 2, 3}, {2, 1, 1}, {1, 0, 0, 1, 1, 1}, {1, 1, 1}, 1},  // composite
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const auto& c : cases) {
      SCOPED_TRACE(shape_str(c.x) + " " + dtype_name(dt));
      const Tensor x = rand_tensor(c.x, 31, -1, 1, dt), w = rand_tensor(c.w, 32, -1, 1, dt);
      auto passes = [&](const Tensor& xi, const Tensor& wi) {
        Variable xv(xi), wv(wi);
        GradientTape tape;
        Tensor y = conv3d(xv.value(), wv.value(), c.s, c.p, c.d, c.groups);
        auto g = tape.gradient(sum(y * y), std::vector<Variable>{xv, wv});
        return std::vector<Tensor>{y.to(Device::cpu()), g[0].to(Device::cpu()), g[1].to(Device::cpu())};
      };
      const auto cpu = passes(x, w), dev = passes(x.to(gpu), w.to(gpu));
      const double tol = dt == DType::f64 ? 1e-10 : 2e-3;  // TF32 on Ampere and later
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(dev[std::size_t(i)], cpu[std::size_t(i)], tol, tol)) << i;
    }
}

TEST(Conv3DLayer, GradientsMatchFiniteDifferences) {
  nn::Conv3D layer(4, {2, 2, 3}, {.strides = {2, 1, 1}, .padding = "same", .dilation_rate = {1, 2, 1},
                                  .groups = 2, .activation = nn::tanh, .dtype = DType::f64});
  const Tensor x = rand_tensor({2, 2, 3, 4, 4}, 11);
  layer.build_for(x.shape());
  Variable b = layer.bias();
  b.assign(rand_tensor({4}, 12));
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x}));
  EXPECT_TRUE(weight_gradients_match([&] { return layer(x); }, {layer.kernel(), layer.bias()}));
  nn::Conv3D last(3, 2, {.dtype = DType::f64, .data_format = nn::DataFormat::channels_last});
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return last(in[0]); },
                              {rand_tensor({1, 3, 3, 3, 2}, 13)}));
}

TEST(Pool3DLayer, GradientsMatchFiniteDifferences) {
  const Tensor x = rand_tensor({1, 2, 5, 4, 5}, 14);
  for (bool same : {false, true}) {
    const Padding p = same ? Padding("same") : Padding("valid");
    nn::MaxPool3D mp({2, 3, 2}, nn::Size3{2, 1, 2}, p);
    nn::AvgPool3D ap({3, 2, 2}, nn::Size3{2, 2, 1}, p);
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return mp(in[0]); }, {x})) << p.str();
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return ap(in[0]); }, {x})) << p.str();
  }
  nn::GlobalAveragePooling3D gap;
  nn::GlobalMaxPooling2D gmp(true, nn::DataFormat::channels_last);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return gap(in[0]); }, {x}));
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return gmp(in[0]); },
                              {rand_tensor({2, 3, 4, 2}, 15)}));
}

TEST(GlobalPoolingLayers, ReduceTheSpatialAxes) {
  const Tensor x5 = rand_tensor({2, 3, 4, 5, 6}, 16), x4 = rand_tensor({2, 3, 4, 5}, 17),
               x3 = rand_tensor({2, 3, 7}, 18);
  EXPECT_TRUE(all_close(nn::GlobalAveragePooling3D()(x5), mean(x5, {2, 3, 4}), 1e-15, 1e-15));
  EXPECT_EQ(nn::GlobalAveragePooling3D(true)(x5).shape(), (Shape{2, 3, 1, 1, 1}));
  EXPECT_EQ(nn::GlobalAveragePooling3D(true, nn::DataFormat::channels_last)(x5).shape(),
            (Shape{2, 1, 1, 1, 6}));
  EXPECT_TRUE(all_close(nn::GlobalMaxPooling2D()(x4), max(x4, {2, 3}), 0, 0));
  EXPECT_TRUE(all_close(nn::GlobalMaxPooling2D(false, nn::DataFormat::channels_last)(x4), max(x4, {1, 2}), 0, 0));
  EXPECT_TRUE(all_close(nn::GlobalMaxPooling1D()(x3), max(x3, {2}), 0, 0));
  EXPECT_TRUE(all_close(nn::GlobalMaxPooling1D(false, nn::DataFormat::channels_last)(x3), max(x3, {1}), 0, 0));
  EXPECT_TRUE(has(error_of([&] { nn::GlobalMaxPooling1D()(x4); }), "GlobalMaxPooling1D")) << error_of([&] { nn::GlobalMaxPooling1D()(x4); });
  EXPECT_TRUE(has(error_of([&] { nn::GlobalMaxPooling1D()(x4); }), "[2, 3, 4, 5]"));
}

TEST(Conv3DLayer, BadInputsNameTheLayerAndTheShapes) {
  // wrong rank
  nn::Conv3D c(4, 3);
  c.set_name("c3");
  std::string e = error_of([&] { c(ones({2, 3, 8, 8})); });
  EXPECT_TRUE(has(e, "Conv3D") && has(e, "'c3'") && has(e, "5-d") && has(e, "[2, 3, 8, 8]")) << e;
  // a kernel larger than the input with valid padding
  nn::Conv3D big(2, {3, 5, 3});
  big.set_name("big");
  e = error_of([&] { big(ones({1, 2, 4, 4, 4})); });
  EXPECT_TRUE(has(e, "Conv3D") && has(e, "'big'") && has(e, "[3, 5, 3]") && has(e, "[1, 2, 4, 4, 4]") &&
              has(e, "valid"))
      << e;
  // "same" fits the same input
  EXPECT_EQ(nn::Conv3D(2, {3, 5, 3}, {.padding = "same"})(ones({1, 2, 4, 4, 4})).shape(),
            (Shape{1, 2, 4, 4, 4}));
  // zero filters, bad sizes and padding
  e = error_of([] { nn::Conv3D(0, 3); });
  EXPECT_TRUE(has(e, "Conv3D") && has(e, "filters must be positive, got 0")) << e;
  EXPECT_TRUE(has(error_of([] { nn::Conv3D(2, {3, 3}); }), "kernel_size needs 1 or 3 values"));
  EXPECT_TRUE(has(error_of([] { nn::Conv3D(2, 3, {.strides = {1, 0, 1}}); }), "strides must be positive"));
  EXPECT_TRUE(has(error_of([] { nn::Conv3D(2, 3, {.padding = 1}); }), "\"valid\" or \"same\""));
  EXPECT_TRUE(has(error_of([] { nn::Conv3D(3, 3, {.groups = 2}); }), "groups=2"));
  // channels after building
  nn::Conv3D built(2, 1);
  built(ones({1, 3, 2, 2, 2}));
  e = error_of([&] { built(ones({1, 4, 2, 2, 2})); });
  EXPECT_TRUE(has(e, "built for 3 input channels") && has(e, "[1, 4, 2, 2, 2]")) << e;
  // pooling
  e = error_of([] { nn::MaxPool3D({3, 3, 3})(ones({1, 1, 2, 5, 5})); });
  EXPECT_TRUE(has(e, "MaxPool3D") && has(e, "[1, 1, 2, 5, 5]")) << e;
  e = error_of([] { nn::AvgPool3D()(ones({1, 4, 4, 4})); });
  EXPECT_TRUE(has(e, "AvgPool3D") && has(e, "5-d") && has(e, "[1, 4, 4, 4]")) << e;
}

std::shared_ptr<nn::Sequential> cnn3d(nn::DataFormat f) {
  const bool last = f == nn::DataFormat::channels_last;
  return std::make_shared<nn::Sequential>(
      nn::Input(last ? Shape{6, 7, 6, 2} : Shape{2, 6, 7, 6}),
      nn::Conv3D(4, 3, {.padding = "same", .activation = nn::relu, .data_format = f}),
      nn::MaxPool3D({2, 2, 2}, std::nullopt, "valid", f),
      nn::Conv3D(4, {2, 3, 2}, {.strides = {1, 2, 1}, .dilation_rate = {1, 1, 2}, .groups = 2, .data_format = f}),
      nn::AvgPool3D({2}, nn::Size3{1}, "same", f), nn::GlobalAveragePooling3D(false, f), nn::Dense(3));
}

TEST(Conv3DLayer, ModelFileAndSummary) {
  auto m = cnn3d(nn::DataFormat::channels_first);
  const Tensor x = rand_tensor({2, 2, 6, 7, 6}, 19, -1, 1, DType::f32);
  const Tensor before = (*m)(x);
  EXPECT_EQ(before.shape(), (Shape{2, 3}));
  const std::string path = ::testing::TempDir() + "conv3d_model.soma";
  m->save(path);
  auto back = load_model(path);
  std::remove(path.c_str());
  EXPECT_TRUE(all_close((*back)(x), before, 0, 0));
  std::ostringstream os;
  m->summary(os);
  const std::string s = os.str();
  EXPECT_TRUE(has(s, "Conv3D") && has(s, "(None, 4, 6, 7, 6)") && has(s, "MaxPool3D")) << s;
}

TEST(Conv3DLayer, OnnxExportImportsBackAndMatches) {
  if (!soma::onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  for (auto f : {nn::DataFormat::channels_first, nn::DataFormat::channels_last}) {
    auto m = cnn3d(f);
    const bool last = f == nn::DataFormat::channels_last;
    const Tensor x = rand_tensor(last ? Shape{2, 6, 7, 6, 2} : Shape{2, 2, 6, 7, 6}, 20, -1, 1, DType::f32);
    const Tensor want = (*m)(x);
    const std::string bytes = soma::onnx::export_to_bytes(*m);
    EXPECT_TRUE(has(bytes, "Conv") && has(bytes, "MaxPool") && has(bytes, "AveragePool"));
    auto back = soma::onnx::load_from_bytes(bytes);
    back->eval();
    EXPECT_TRUE(all_close(back->call({x})[0], want, 1e-5, 1e-5));
  }
  auto g = std::make_shared<nn::Sequential>(nn::Input({3, 5, 4}), nn::GlobalMaxPooling2D(true),
                                            nn::Flatten(), nn::Dense(2));
  const Tensor x = rand_tensor({2, 3, 5, 4}, 21, -1, 1, DType::f32);
  auto back = soma::onnx::load_from_bytes(soma::onnx::export_to_bytes(*g));
  back->eval();
  EXPECT_TRUE(all_close(back->call({x})[0], (*g)(x), 1e-6, 1e-6));
}

// A Conv node with 3 spatial axes (as another exporter writes it): explicit begin/end pads,
// auto_pad SAME_UPPER / SAME_LOWER / VALID, group and bias, against conv3d.
TEST(Conv3dOnnx, ImportsA3dConvNode) {
  if (!soma::onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  using namespace soma::onnx_test;
  const Tensor x = rand_tensor({1, 4, 4, 5, 6}, 40, -1, 1, DType::f32);
  const Tensor w = rand_tensor({2, 2, 2, 3, 2}, 41, -1, 1, DType::f32);
  const Tensor b = rand_tensor({2}, 42, -1, 1, DType::f32);
  const Tensor bias = reshape(b, {1, 2, 1, 1, 1});
  struct Case {
    std::vector<std::string> attrs;
    std::array<std::int64_t, 6> soma_pads;
  };
  const std::vector<std::string> common{attr_ints("strides", {1, 2, 1}), attr_int("group", 2)};
  const Case cases[] = {
      // ONNX {d_begin, h_begin, w_begin, d_end, h_end, w_end} -> soma {d_b, d_e, h_b, h_e, w_b, w_e}
      {{attr_ints("pads", {1, 0, 2, 0, 1, 1})}, {1, 0, 0, 1, 2, 1}},
      {{attr_string("auto_pad", "SAME_UPPER")}, {0, 1, 1, 1, 0, 1}},
      {{attr_string("auto_pad", "SAME_LOWER")}, {1, 0, 1, 1, 1, 0}},
      {{attr_string("auto_pad", "VALID")}, {0, 0, 0, 0, 0, 0}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> attrs = common;
    attrs.insert(attrs.end(), c.attrs.begin(), c.attrs.end());
    const std::string bytes = onnx_model({{"Conv", {"x", "w", "b"}, {"y"}, attrs}},
                                         {{"x", x.shape()}, {"w", w.shape()}, {"b", b.shape()}}, "y");
    auto m = soma::onnx::load_from_bytes(bytes);
    const Tensor got = m->call({x, w, b})[0];
    EXPECT_TRUE(all_close(got, conv3d(x, w, {1, 2, 1}, c.soma_pads, {1, 1, 1}, 2) + bias, 1e-5, 1e-5))
        << shape_str(Shape(c.soma_pads.begin(), c.soma_pads.end()));
  }
}

TEST(Conv3DLayer, BuildsFromKerasJson) {
  const std::string j = R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4, 6, 6, 2], "dtype": "float32", "name": "in"}},
    {"module": "keras.layers", "class_name": "Conv3D", "registered_name": null,
     "config": {"name": "c", "trainable": true, "dtype": "float32", "filters": 3, "kernel_size": [2, 3, 3],
       "strides": [1, 1, 1], "padding": "same", "data_format": "channels_last", "dilation_rate": [1, 1, 1],
       "groups": 1, "activation": "relu", "use_bias": true,
       "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
       "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
       "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
       "kernel_constraint": null, "bias_constraint": null}},
    {"class_name": "MaxPooling3D", "config": {"name": "p", "pool_size": [2, 2, 2], "padding": "valid",
       "strides": null, "data_format": "channels_last"}},
    {"class_name": "GlobalAveragePooling3D", "config": {"name": "g", "data_format": "channels_last", "keepdims": false}}
  ]}})";
  auto m = model::from_keras_json(j);
  EXPECT_EQ((*m)(zeros({1, 4, 6, 6, 2})).shape(), (Shape{1, 3}));
}

}  // namespace
