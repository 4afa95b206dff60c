// Conv2D, Conv2DTranspose, MaxPool2D, AvgPool2D and GlobalAveragePooling2D: shapes, parameter
// counts, forward passes against plain loops, gradient checks (input and weights) and errors.
#include <cmath>
#include <functional>

#include "soma/nn/conv.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::rand_tensor;

using soma::testing::error_of;

// Finite-difference check of d sum(layer(x) * r) / d weight for every weight, perturbing each
// element in place through Variable::assign.
::testing::AssertionResult check_weight_gradients(nn::Module& layer, const Tensor& x,
                                                  double eps = 1e-6, double tol = 1e-5) {
  auto params = layer.named_parameters();
  if (params.empty()) return ::testing::AssertionFailure() << "layer has no parameters";
  Tensor r;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor y = layer(x);
    r = rand_tensor(y.shape(), 4321, -1.0, 1.0, y.dtype());
    std::vector<Variable> vars;
    for (auto& [n, v] : params) vars.push_back(v);
    grads = tape.gradient(sum(y * r), vars, UnconnectedGradients::Zero);
  }
  auto loss = [&] { return sum(layer(x) * r).item<double>(); };
  for (std::size_t k = 0; k < params.size(); ++k) {
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
    const std::string& name = params[k].first;
    Variable& v = params[k].second;
    if (!grads[k].defined() || grads[k].shape() != v.shape())
      return ::testing::AssertionFailure() << "gradient of '" << name << "' is missing or has "
                                           << "the wrong shape";
    std::vector<double> base = v.value().to_vector<double>();
    std::vector<double> g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < base.size(); ++j) {
      auto shifted = [&](double delta) {
        std::vector<double> vals = base;
        vals[j] += delta;
        v.assign(constant(vals, v.shape()));
        return loss();
      };
      double num = (shifted(eps) - shifted(-eps)) / (2 * eps);
      v.assign(constant(base, v.shape()));
      if (std::abs(num - g[j]) > tol * (1.0 + std::abs(num)))
        return ::testing::AssertionFailure() << "weight '" << name << "' element " << j
                                             << ": tape gradient " << g[j]
                                             << " vs finite difference " << num;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_input_gradient(nn::Module& layer, const Tensor& x) {
  return check_gradients([&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x});
}

// Random, non-zero bias so that the checks see it.
void randomise_weights(nn::Module& layer, std::uint64_t seed) {
  for (auto& v : layer.parameters()) v.assign(rand_tensor(v.shape(), seed++, -0.5, 0.5, v.dtype()));
}

// ---- Conv2D -----------------------------------------------------------------------------------

TEST(Conv2D, ParameterCountMatchesKeras) {
  nn::Conv2D c(32, 3);
  c.build_for({1, 3, 28, 28});
  EXPECT_EQ(c.count_params(), 896);  // 32 * 3 * 3 * 3 + 32
  nn::Conv2D nb(32, 3, {.use_bias = false});
  nb.build_for({1, 3, 28, 28});
  EXPECT_EQ(nb.count_params(), 864);
  nn::Conv2D grouped(8, {3, 2}, {.groups = 2});
  grouped.build_for({1, 4, 8, 8});
  EXPECT_EQ(grouped.count_params(), 8 * 2 * 3 * 2 + 8);
}

TEST(Conv2D, WeightsAreOihwWithKerasNames) {
  nn::Conv2D c(16, {5, 3});
  c.build_for({1, 6, 10, 10});
  auto p = c.named_parameters();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].first, "kernel");
  EXPECT_EQ(p[0].second.shape(), (Shape{16, 6, 5, 3}));
  EXPECT_EQ(p[1].first, "bias");
  EXPECT_EQ(p[1].second.shape(), (Shape{16}));
  EXPECT_EQ(c.kernel().dtype(), DType::f32);
  // bias starts at zero, kernel is glorot-uniform: |w| <= sqrt(6 / (fan_in + fan_out))
  EXPECT_TRUE(all_close(c.bias().value(), std::vector<double>(16, 0.0)));
  const double limit = std::sqrt(6.0 / (6 * 15 + 16 * 15));
  EXPECT_LE(max(abs(c.kernel().value())).item<double>(), limit);
}

TEST(Conv2D, OutputShapesForPaddingAndStrides) {
  Tensor x = zeros({2, 3, 28, 28});
  EXPECT_EQ(nn::Conv2D(8, 3)(x).shape(), (Shape{2, 8, 26, 26}));
  EXPECT_EQ(nn::Conv2D(8, 3, {.padding = "same"})(x).shape(), (Shape{2, 8, 28, 28}));
  EXPECT_EQ(nn::Conv2D(8, 3, {.strides = 2, .padding = "same"})(x).shape(),
            (Shape{2, 8, 14, 14}));
  EXPECT_EQ(nn::Conv2D(8, 5, {.strides = 2})(x).shape(), (Shape{2, 8, 12, 12}));
  EXPECT_EQ(nn::Conv2D(8, 3, {.dilation_rate = 2})(x).shape(), (Shape{2, 8, 24, 24}));
  nn::Conv2D c(8, 3, {.strides = {2, 1}, .padding = 1});
  EXPECT_EQ(c.output_shape({-1, 3, 28, 28}), (Shape{-1, 8, 14, 28}));
  EXPECT_EQ(c(x).shape(), (Shape{2, 8, 14, 28}));
}

TEST(Conv2D, ForwardIsConvolutionPlusBiasThenActivation) {
  nn::Conv2D c(2, {2, 2}, {.activation = nn::relu, .dtype = DType::f64});
  Tensor x = rand_tensor({1, 1, 3, 3}, 1);
  c.build_for(x.shape());
  randomise_weights(c, 10);
  auto xv = x.to_vector<double>(), kv = c.kernel().value().to_vector<double>();
  auto bv = c.bias().value().to_vector<double>();
  std::vector<double> expect;
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        double s = bv[std::size_t(o)];
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b)
            s += xv[std::size_t((i + a) * 3 + j + b)] * kv[std::size_t(o * 4 + a * 2 + b)];
        expect.push_back(std::max(s, 0.0));
      }
  EXPECT_TRUE(all_close(c(x), expect, 1e-12));
}

TEST(Conv2D, CastsInputsToItsDtype) {
  nn::Conv2D c(2, 3, {.dtype = DType::f64});
  EXPECT_EQ(c(zeros({1, 1, 4, 4})).dtype(), DType::f64);
}

TEST(Conv2D, GradientsWithRespectToInput) {
  nn::Conv2D c(3, 3, {.strides = 2, .padding = "same", .activation = nn::tanh, .dtype = DType::f64});
  Tensor x = rand_tensor({2, 2, 5, 5}, 2);
  c.build_for(x.shape());
  randomise_weights(c, 20);
  EXPECT_TRUE(check_input_gradient(c, x));
}

TEST(Conv2D, GradientsWithRespectToWeights) {
  nn::Conv2D c(4, {3, 2}, {.padding = "same", .dilation_rate = {1, 2}, .groups = 2,
                           .dtype = DType::f64});
  Tensor x = rand_tensor({2, 2, 5, 6}, 3);
  c.build_for(x.shape());
  randomise_weights(c, 30);
  EXPECT_TRUE(check_weight_gradients(c, x));
}

TEST(Conv2D, KernelRegularizerAddsItsPenalty) {
  nn::Conv2D c(2, 3, {.kernel_regularizer = nn::regularizers::l2(0.5), .dtype = DType::f64});
  c.build_for({1, 1, 4, 4});
  auto losses = c.regularization_losses();
  ASSERT_EQ(losses.size(), 1u);
  const double expect = 0.5 * sum(square(c.kernel().value())).item<double>();
  EXPECT_NEAR(losses[0].item<double>(), expect, 1e-12);
}

TEST(Conv2D, RejectsWrongChannelsAndRank) {
  nn::Conv2D c(4, 3);
  c.set_name("conv");
  c(zeros({1, 3, 8, 8}));
  EXPECT_EQ(error_of([&] { c(zeros({1, 2, 8, 8})); }),
            "Conv2D: layer 'conv' was built for 3 input channels, got input [1, 2, 8, 8]");
  EXPECT_EQ(error_of([&] { c(zeros({3, 8, 8})); }),
            "Conv2D: layer 'conv' expects 4-d inputs [batch, channels, height, width], got "
            "[3, 8, 8]");
}

TEST(Conv2D, RejectsBadConfiguration) {
  EXPECT_EQ(error_of([] { nn::Conv2D(0, 3); }), "Conv2D: filters must be positive, got 0");
  EXPECT_EQ(error_of([] { nn::Conv2D(4, 3, {.strides = 0}); }),
            "Conv2D: strides must be positive, got [0, 0]");
  EXPECT_EQ(error_of([] { nn::Conv2D(6, 3, {.groups = 4}); }),
            "Conv2D: groups=4 must be >= 1 and divide filters=6");
  EXPECT_NE(error_of([] { nn::Conv2D(4, 3, {.groups = 2})(zeros({1, 3, 8, 8})); })
                .find("groups=2 does not divide the input's 3 channels"),
            std::string::npos);
}

// ---- Conv2DTranspose --------------------------------------------------------------------------

TEST(Conv2DTranspose, ShapesAndParameterCount) {
  nn::Conv2DTranspose t(8, 3, {.strides = 2, .padding = "same"});
  Tensor y = t(zeros({2, 4, 7, 7}));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 14, 14}));
  EXPECT_EQ(t.kernel().shape(), (Shape{4, 8, 3, 3}));
  EXPECT_EQ(t.count_params(), 4 * 8 * 9 + 8);
  EXPECT_EQ(nn::Conv2DTranspose(8, 3, {.strides = 2}).output_shape({-1, 4, 7, 7}),
            (Shape{-1, 8, 15, 15}));
}

TEST(Conv2DTranspose, UndoesTheShapeOfAStridedConv2D) {
  Tensor x = zeros({1, 3, 16, 16});
  Tensor down = nn::Conv2D(6, 4, {.strides = 2, .padding = "same"})(x);
  Tensor up = nn::Conv2DTranspose(3, 4, {.strides = 2, .padding = "same"})(down);
  EXPECT_EQ(up.shape(), x.shape());
}

TEST(Conv2DTranspose, GradientsWithRespectToInputAndWeights) {
  nn::Conv2DTranspose t(3, {3, 2}, {.strides = {2, 1}, .padding = "same",
                                    .activation = nn::sigmoid, .dtype = DType::f64});
  Tensor x = rand_tensor({2, 2, 3, 3}, 4);
  t.build_for(x.shape());
  randomise_weights(t, 40);
  EXPECT_TRUE(check_input_gradient(t, x));
  EXPECT_TRUE(check_weight_gradients(t, x));
}

// ---- pooling ----------------------------------------------------------------------------------

TEST(MaxPool2D, DefaultsToTwoByTwoWithStrideTwo) {
  nn::MaxPool2D p;
  EXPECT_EQ(p.strides(), Size2(2, 2));
  Tensor x = constant(std::vector<double>{1, 5, 2, 0,   //
                                          3, 4, 8, 1,   //
                                          0, 0, -1, -2,  //
                                          9, 0, -3, -4},
                      {1, 1, 4, 4});
  EXPECT_TRUE(all_close(p(x), {5, 8, 9, -1}));
  EXPECT_EQ(p.count_params(), 0);
}

TEST(MaxPool2D, OutputShapes) {
  EXPECT_EQ(nn::MaxPool2D(2)(zeros({3, 4, 7, 7})).shape(), (Shape{3, 4, 3, 3}));
  EXPECT_EQ(nn::MaxPool2D(2, std::nullopt, "same")(zeros({3, 4, 7, 7})).shape(),
            (Shape{3, 4, 4, 4}));
  EXPECT_EQ(nn::MaxPool2D(3, Size2(1)).output_shape({-1, 4, 7, 9}), (Shape{-1, 4, 5, 7}));
}

TEST(MaxPool2D, GradientWithRespectToInput) {
  nn::MaxPool2D p(3, Size2(2), "same");
  EXPECT_TRUE(check_input_gradient(p, rand_tensor({2, 2, 5, 6}, 5)));
}

TEST(AvgPool2D, AveragesEachWindow) {
  nn::AvgPool2D p;
  Tensor x = constant(std::vector<double>{1, 5, 2, 0,  //
                                          3, 4, 8, 1,  //
                                          0, 0, -1, -2, //
                                          9, 0, -3, -4},
                      {1, 1, 4, 4});
  EXPECT_TRUE(all_close(p(x), {13.0 / 4, 11.0 / 4, 9.0 / 4, -10.0 / 4}));
}

TEST(AvgPool2D, GradientWithRespectToInput) {
  nn::AvgPool2D p({2, 3}, Size2{1, 2}, "same");
  EXPECT_TRUE(check_input_gradient(p, rand_tensor({2, 2, 5, 6}, 6)));
}

TEST(GlobalAveragePooling2D, MeansOverHeightAndWidth) {
  nn::GlobalAveragePooling2D g;
  Tensor x = rand_tensor({2, 3, 4, 5}, 7);
  Tensor y = g(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  auto xv = x.to_vector<double>();
  std::vector<double> expect;
  for (int p = 0; p < 6; ++p) {
    double s = 0;
    for (int i = 0; i < 20; ++i) s += xv[std::size_t(p * 20 + i)];
    expect.push_back(s / 20);
  }
  EXPECT_TRUE(all_close(y, expect, 1e-12));
  EXPECT_EQ(nn::GlobalAveragePooling2D(true)(x).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(g.output_shape({-1, 3, 4, 5}), (Shape{-1, 3}));
}

TEST(GlobalAveragePooling2D, GradientWithRespectToInput) {
  nn::GlobalAveragePooling2D g;
  EXPECT_TRUE(check_input_gradient(g, rand_tensor({2, 3, 2, 3}, 8)));
}

TEST(Pooling, RejectsBadInputs) {
  nn::MaxPool2D p(2);
  p.set_name("pool");
  EXPECT_EQ(error_of([&] { p(zeros({4, 4})); }),
            "MaxPool2D: layer 'pool' expects 4-d inputs [batch, channels, height, width], got "
            "[4, 4]");
  EXPECT_EQ(error_of([] { nn::AvgPool2D(0); }), "AvgPool2D: pool_size must be positive, got [0, 0]");
  EXPECT_NE(error_of([] { nn::MaxPool2D(5)(zeros({1, 1, 4, 4})); }).find("larger than the padded input"),
            std::string::npos);
}

TEST(ConvNet, SmallNetworkTrainsEndToEnd) {
  // conv -> pool -> conv -> global pool: gradients reach every weight.
  nn::Conv2D c1(4, 3, {.padding = "same", .activation = nn::relu, .dtype = DType::f64});
  nn::MaxPool2D p;
  nn::Conv2D c2(5, 3, {.activation = nn::relu, .dtype = DType::f64});
  nn::GlobalAveragePooling2D g;
  Tensor x = rand_tensor({3, 2, 8, 8}, 9);
  GradientTape tape;
  Tensor y = g(c2(p(c1(x))));
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  std::vector<Variable> vars = c1.parameters();
  for (auto& v : c2.parameters()) vars.push_back(v);
  auto grads = tape.gradient(sum(y), vars);
  for (auto& gr : grads) EXPECT_TRUE(gr.defined());
}

}  // namespace
}  // namespace soma
