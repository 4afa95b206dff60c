// data_format = channels_last (NHWC, Keras' default) for Conv2D and the 2-D pooling layers: a
// channels_last model equals the channels_first one on transposed inputs (forward and
// gradients), its config says so through model files and layer configs, and it exports to ONNX.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "error_testing.hpp"
#include "soma/model/serialization.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using nn::DataFormat;
using testing::all_close;
using testing::rand_tensor;

constexpr std::int64_t kC = 3, kH = 6, kW = 6, kHidden = 4;

// Conv2D -> BatchNorm -> MaxPool2D -> Conv2D -> AvgPool2D -> Flatten -> Dense, in one format.
std::shared_ptr<nn::Sequential> make_model(DataFormat f) {
  const bool last = f == DataFormat::channels_last;
  auto m = std::make_shared<nn::Sequential>();
  m->add(nn::Input(last ? Shape{kH, kW, kC} : Shape{kC, kH, kW}));
  m->add(nn::Conv2D(kHidden, 3, {.padding = "same", .activation = nn::relu, .data_format = f}));
  m->add(nn::BatchNormalization({.axis = last ? -1 : 1}));
  m->add(nn::MaxPool2D(2, std::nullopt, "valid", f));
  m->add(nn::Conv2D(5, 2, {.strides = 1, .padding = "valid", .data_format = f}));
  m->add(nn::AvgPool2D(2, 1, "same", f));
  m->add(nn::Flatten());
  m->add(nn::Dense(3));
  return m;
}

// The channels_first model's weights in the channels_last model: the same convolution kernels
// (one layout for both formats) and batch-norm vectors; the Dense rows after Flatten permuted
// from (c, h, w) order to (h, w, c) order.
void copy_weights(nn::Sequential& from_cf, nn::Sequential& to_cl, const Shape& flat_chw) {
  auto w = from_cf.state_dict();
  const std::int64_t c = flat_chw[0], h = flat_chw[1], ww = flat_chw[2];
  Tensor k = w.at("6.kernel");  // [c*h*w, out]
  const std::int64_t out = k.shape()[1];
  Tensor chw = reshape(k, {c, h, ww, out});
  w["6.kernel"] = reshape(contiguous(transpose(chw, {1, 2, 0, 3})), {h * ww * c, out});
  to_cl.load_state_dict(w);
}

Tensor nhwc(const Tensor& x) { return contiguous(transpose(x, {0, 2, 3, 1})); }

struct Pair {
  std::shared_ptr<nn::Sequential> cf, cl;
  Tensor x_cf, x_cl;
};

Pair make_pair_of_models() {
  Pair p{make_model(DataFormat::channels_first), make_model(DataFormat::channels_last), {}, {}};
  p.x_cf = rand_tensor({2, kC, kH, kW}, 11, -1.0, 1.0, DType::f32);
  p.x_cl = nhwc(p.x_cf);
  (void)p.cf->predict(p.x_cf);  // built
  (void)p.cl->predict(p.x_cl);
  // Non-trivial batch-norm statistics, so that the axis matters.
  auto w = p.cf->state_dict();
  w["1.moving_mean"] = rand_tensor({kHidden}, 3, -0.5, 0.5, DType::f32);
  w["1.moving_variance"] = rand_tensor({kHidden}, 4, 0.5, 2.0, DType::f32);
  w["1.gamma"] = rand_tensor({kHidden}, 5, 0.5, 1.5, DType::f32);
  w["1.beta"] = rand_tensor({kHidden}, 6, -0.5, 0.5, DType::f32);
  p.cf->load_state_dict(w);
  copy_weights(*p.cf, *p.cl, Shape{5, 2, 2});
  return p;
}

TEST(DataFormat, ChannelsLastLayersGiveNhwcShapes) {
  auto m = make_model(DataFormat::channels_last);
  Tensor y = m->layers()[0]->operator()(zeros({2, kH, kW, kC}));
  EXPECT_EQ(y.shape(), (Shape{2, kH, kW, kHidden}));
  nn::MaxPool2D pool(2, std::nullopt, "valid", DataFormat::channels_last);
  EXPECT_EQ(pool(zeros({1, 6, 4, 3})).shape(), (Shape{1, 3, 2, 3}));
  EXPECT_EQ(pool.output_shape({-1, 6, 4, 3}), (Shape{-1, 3, 2, 3}));
  nn::GlobalAveragePooling2D gap(false, DataFormat::channels_last), gapk(true, DataFormat::channels_last);
  EXPECT_EQ(gap(zeros({2, 5, 4, 3})).shape(), (Shape{2, 3}));
  EXPECT_EQ(gapk(zeros({2, 5, 4, 3})).shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(gapk.output_shape({2, 5, 4, 3}), (Shape{2, 1, 1, 3}));
  // The channel count is checked on the last axis, and the message says the layout.
  nn::Conv2D conv(2, 3, {.data_format = DataFormat::channels_last});
  (void)conv(zeros({1, 5, 5, 3}));
  auto msg = testing::error_of([&] { (void)conv(zeros({1, 3, 5, 5})); });
  EXPECT_NE(msg.find("built for 3 input channels"), std::string::npos) << msg;
  auto msg2 = testing::error_of([&] { (void)pool(zeros({1, 5, 5})); });
  EXPECT_NE(msg2.find("[batch, height, width, channels] (channels_last)"), std::string::npos) << msg2;
}

TEST(DataFormat, Conv2DTransposeChannelsLastEqualsChannelsFirst) {
  nn::Conv2DTranspose cf(3, {3, 2}, {.strides = 2, .padding = "same", .activation = nn::tanh});
  nn::Conv2DTranspose cl(3, {3, 2}, {.strides = 2, .padding = "same", .activation = nn::tanh,
                                     .data_format = DataFormat::channels_last});
  Tensor x = rand_tensor({2, 4, 5, 3}, 21, -1.0, 1.0, DType::f32);
  (void)cf(x);
  (void)cl(nhwc(x));
  auto w = cf.state_dict();
  w["bias"] = rand_tensor({3}, 22, -1.0, 1.0, DType::f32);
  cf.load_state_dict(w);
  cl.load_state_dict(w);
  Tensor y = cl(nhwc(x));
  EXPECT_EQ(y.shape(), (Shape{2, 10, 6, 3}));
  EXPECT_EQ(cl.output_shape({-1, 5, 3, 4}), (Shape{-1, 10, 6, 3}));
  EXPECT_TRUE(all_close(y, nhwc(cf(x)), 1e-6, 1e-6));
}

TEST(DataFormat, ChannelsLastEqualsChannelsFirstOnTransposedInputs) {
  auto p = make_pair_of_models();
  Tensor y_cf = p.cf->predict(p.x_cf), y_cl = p.cl->predict(p.x_cl);
  EXPECT_TRUE(all_close(y_cl, y_cf, 1e-5, 1e-5));
  // In training mode too (batch statistics over N, H, W in both layouts).
  p.cf->train();
  p.cl->train();
  EXPECT_TRUE(all_close((*p.cl)(p.x_cl), (*p.cf)(p.x_cf), 1e-5, 1e-5));
}

TEST(DataFormat, GradientsMatchTheChannelsFirstModel) {
  auto p = make_pair_of_models();
  Tensor r = rand_tensor({2, 3}, 99, -1.0, 1.0, DType::f32);
  auto grads_of = [&](nn::Sequential& m, const Tensor& x0) {
    Variable x(x0);
    std::vector<Variable> vars{x};
    for (auto& [n, v] : m.named_parameters()) vars.push_back(v);
    GradientTape tape;
    Tensor y = m(x.value());
    return tape.gradient(sum(y * r), vars);
  };
  p.cf->train();
  p.cl->train();
  auto g_cf = grads_of(*p.cf, p.x_cf), g_cl = grads_of(*p.cl, p.x_cl);
  ASSERT_EQ(g_cf.size(), g_cl.size());
  EXPECT_TRUE(all_close(g_cl[0], nhwc(g_cf[0]), 1e-5, 1e-5)) << "input gradient";
  auto names = p.cf->named_parameters();
  for (std::size_t i = 1; i < g_cf.size(); ++i) {
    const std::string& n = names[i - 1].first;
    SCOPED_TRACE(n);
    Tensor want = g_cf[i];
    if (!want.defined()) {  // the moving statistics: no gradient in either model
      EXPECT_FALSE(g_cl[i].defined());
      continue;
    }
    if (n == "6.kernel") {  // the permuted Dense rows
      Tensor chw = reshape(want, {5, 2, 2, 3});
      want = reshape(contiguous(transpose(chw, {1, 2, 0, 3})), {20, 3});
    }
    EXPECT_TRUE(all_close(g_cl[i], want, 1e-5, 1e-5));
  }
}

TEST(DataFormat, ConfigSaysChannelsLastAndRoundTrips) {
  auto p = make_pair_of_models();
  const std::string cfg = serialization::layer_config(*p.cl->layers()[0]);
  EXPECT_NE(cfg.find("\"data_format\":\"channels_last\""), std::string::npos) << cfg;
  auto again = serialization::layer_from_config(cfg);
  EXPECT_EQ(serialization::layer_config(*again), cfg);
  // A config without the field (older files) reads as channels_first.
  auto old = serialization::layer_from_config(
      R"({"class_name":"MaxPool2D","config":{"name":"p","pool_size":[2,2],"strides":[2,2],"padding":"valid"}})");
  EXPECT_EQ(dynamic_cast<nn::MaxPool2D&>(*old).data_format(), DataFormat::channels_first);
  std::string nhwc_cfg = cfg;
  nhwc_cfg.replace(nhwc_cfg.find("channels_last"), 13, "nhwc");
  auto bad = testing::error_of([&] { (void)serialization::layer_from_config(nhwc_cfg); });
  EXPECT_NE(bad.find("data_format"), std::string::npos) << bad;
  EXPECT_NE(bad.find("channels_last"), std::string::npos) << bad;

  const std::string path = ::testing::TempDir() + "/soma_channels_last.soma";
  p.cl->save(path);
  auto loaded = load_model(path);
  std::remove(path.c_str());
  EXPECT_TRUE(all_close(loaded->predict(p.x_cl), p.cl->predict(p.x_cl), 0.0, 0.0));
  std::ostringstream a, b;
  p.cl->summary(a);
  loaded->summary(b);
  EXPECT_EQ(a.str(), b.str());
  EXPECT_NE(a.str().find("(None, 6, 6, 4)"), std::string::npos) << a.str();
}

TEST(DataFormat, OnnxExportTransposesAroundTheNchwNodes) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  auto p = make_pair_of_models();
  const std::string bytes = onnx::export_to_bytes(*p.cl);
  EXPECT_NE(bytes.find("Transpose"), std::string::npos);
  auto back = onnx::load_from_bytes(bytes);
  EXPECT_TRUE(all_close(back->predict(p.x_cl), p.cl->predict(p.x_cl), 1e-5, 1e-5));
}

}  // namespace
}  // namespace soma
