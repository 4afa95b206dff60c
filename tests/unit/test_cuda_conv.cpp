// The CUDA kernels of the convolution and pooling ops (src/backend/cuda/conv.cpp: cuDNN for the
// convolutions, conv_pool.cu for pooling) against the CPU kernels: every one of the nine ops,
// forward and gradient ops, f32 and f64 (f16/bf16 loosely), odd shapes, strides, dilation,
// groups, "same" (asymmetric) and "valid" padding, and the gradients of Conv2D / MaxPool2D /
// AvgPool2D layers through GradientTape. Without a usable GPU the device tests skip with the
// reason; the per-element logic is tested on the CPU in test_cuda_conv_plan.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "soma/cuda.hpp"
#include "soma/nn/conv.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::error_of;
using soma::testing::rand_tensor;
using Ints = std::vector<std::int64_t>;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);

Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// TF32 off for the duration (restored after): f32 convolutions compare at f32 precision.
struct NoTf32 {
  bool was = cuda::allow_tf32();
  NoTf32() { cuda::set_allow_tf32(false); }
  ~NoTf32() { cuda::set_allow_tf32(was); }
};

Attrs conv_attrs(const Ints& st, const Ints& pads, const Ints& dil, std::int64_t groups) {
  return {{"strides", st}, {"pads", pads}, {"dilation", dil}, {"groups", groups}};
}
Attrs pool_attrs(const Ints& pool, const Ints& st, const Ints& pads) {
  return {{"pool", pool}, {"strides", st}, {"pads", pads}};
}

// The op on the CPU and on the GPU (inputs moved there), the GPU's result brought back.
std::pair<Tensor, Tensor> both(const char* op, const std::vector<Tensor>& in, const Attrs& a) {
  std::vector<Tensor> gin;
  for (const Tensor& t : in) gin.push_back(t.to(kGpu));
  return {call_op1(get_op(op), in, a), host(call_op1(get_op(op), gin, a))};
}

struct ConvCase {
  Shape x, w;
  Ints st, pads, dil;
  std::int64_t groups;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},  // "same", symmetric
      {{2, 3, 9, 7}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},  // odd sizes, stride 2
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {2, 2}, {0, 1, 0, 1}, {1, 1}, 1},  // "same", asymmetric
      {{2, 4, 5, 5}, {6, 2, 3, 3}, {2, 1}, {1, 0, 1, 1}, {1, 2}, 2},  // the op's test sample
      {{1, 2, 11, 6}, {3, 2, 4, 2}, {1, 3}, {2, 1, 0, 3}, {1, 1}, 1},
      {{2, 4, 7, 9}, {4, 1, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 4},  // depthwise, dilated
      {{3, 5, 6, 6}, {7, 5, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},  // 1x1
      {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},
      {{2, 6, 13, 10}, {6, 3, 5, 4}, {3, 2}, {2, 2, 1, 2}, {1, 1}, 2},
  };
  return cases;
}

std::string describe(const ConvCase& k) {
  return "x " + shape_str(k.x) + " w " + shape_str(k.w) + " strides " + shape_str(k.st) +
         " pads " + shape_str(k.pads) + " dilation " + shape_str(k.dil) + " groups " +
         std::to_string(k.groups);
}

void check_convolutions(DType dt, double tol) {
  for (const ConvCase& k : conv_cases()) {
    const std::string what = describe(k) + " " + dtype_name(dt);
    const Attrs a = conv_attrs(k.st, k.pads, k.dil, k.groups);
    const Tensor x = rand_tensor(k.x, 11, -1, 1, dt), w = rand_tensor(k.w, 12, -1, 1, dt);
    const Tensor b = rand_tensor({k.w[0]}, 13, -1, 1, dt);
    auto [y, gy] = both("conv2d", {x, w}, a);
    EXPECT_TRUE(all_close(gy, y, tol, tol)) << "conv2d " << what;
    for (bool relu : {false, true}) {
      auto [z, gz] = both("conv2d_bias_act", {x, w, b}, Attrs(a).set("relu", std::int64_t(relu)));
      EXPECT_TRUE(all_close(gz, z, tol, tol)) << "conv2d_bias_act relu " << relu << " " << what;
    }
    auto [z2, gz2] = both("conv2d_bias_act", {x, w}, Attrs(a).set("relu", std::int64_t(1)));
    EXPECT_TRUE(all_close(gz2, z2, tol, tol)) << "conv2d_bias_act without bias " << what;

    const Tensor g = rand_tensor(y.shape(), 14, -1, 1, dt);
    auto [dx, gdx] = both("conv2d_backprop_input", {g, w}, Attrs(a).set("input_shape", Ints(k.x)));
    EXPECT_TRUE(all_close(gdx, dx, tol, tol)) << "conv2d_backprop_input " << what;
    auto [dw, gdw] =
        both("conv2d_backprop_filter", {x, g}, Attrs(a).set("filter_shape", Ints(k.w)));
    EXPECT_TRUE(all_close(gdw, dw, tol * 4, tol)) << "conv2d_backprop_filter " << what;
  }
}

// Equal values, NaN where the other is NaN.
::testing::AssertionResult same_values(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want "
                                           << w[i];
  return ::testing::AssertionSuccess();
}

}  // namespace

// ---- everywhere --------------------------------------------------------------------------------
TEST(CudaConvRegistration, EveryConvolutionAndPoolingOpHasACudaKernelWhenBuilt) {
  for (const char* op : {"conv2d", "conv2d_bias_act", "conv2d_backprop_input",
                         "conv2d_backprop_filter", "max_pool2d", "max_pool2d_grad",
                         "max_pool2d_grad_grad", "avg_pool2d", "avg_pool2d_grad"})
    EXPECT_EQ(get_op(op).kernels[int(DeviceKind::CUDA)] != nullptr, cuda::is_built()) << op;
}

// ---- convolutions ----------------------------------------------------------------------------
TEST(CudaConv, EveryConvolutionOpMatchesTheCpuF64) {
  SKIP_WITHOUT_GPU();
  check_convolutions(DType::f64, 1e-10);
}

TEST(CudaConv, EveryConvolutionOpMatchesTheCpuF32) {
  SKIP_WITHOUT_GPU();
  NoTf32 full;
  check_convolutions(DType::f32, 1e-4);
}

TEST(CudaConv, Tf32IsCloseToTheCpu) {
  SKIP_WITHOUT_GPU();
  cuda::set_allow_tf32(true);
  const Tensor x = rand_tensor({4, 16, 12, 12}, 21, -1, 1, DType::f32);
  const Tensor w = rand_tensor({32, 16, 3, 3}, 22, -1, 1, DType::f32);
  const Tensor want = conv2d(x, w, 1, "same");
  EXPECT_TRUE(all_close(host(conv2d(x.to(kGpu), w.to(kGpu), 1, "same")), want, 5e-2, 1e-2));
}

TEST(CudaConv, HalfPrecisionIsCloseToTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f16, DType::bf16}) {
    const double tol = dt == DType::f16 ? 2e-2 : 1e-1;
    const Tensor x = rand_tensor({2, 8, 9, 9}, 23, -1, 1, dt);
    const Tensor w = rand_tensor({8, 8, 3, 3}, 24, -1, 1, dt);
    const Tensor want = conv2d(x, w, 2, "same").cast(DType::f32);
    EXPECT_TRUE(all_close(host(conv2d(x.to(kGpu), w.to(kGpu), 2, "same")).cast(DType::f32), want,
                          tol, tol))
        << dtype_name(dt);
  }
}

TEST(CudaConv, PublicFunctionsWithSameAndValidPadding) {
  SKIP_WITHOUT_GPU();
  NoTf32 full;
  const Tensor x = rand_tensor({2, 3, 10, 7}, 31, -1, 1, DType::f32);
  const Tensor w = rand_tensor({4, 3, 3, 2}, 32, -1, 1, DType::f32);
  const Tensor gx = x.to(kGpu), gw = w.to(kGpu);
  for (const char* pad : {"same", "valid"})
    for (std::int64_t s : {1, 2, 3}) {
      EXPECT_TRUE(all_close(host(conv2d(gx, gw, s, pad)), conv2d(x, w, s, pad), 1e-4, 1e-4))
          << pad << " stride " << s;
      const Tensor up = rand_tensor({2, 4, 5, 4}, 33, -1, 1, DType::f32);
      const Tensor k = rand_tensor({4, 3, 3, 3}, 34, -1, 1, DType::f32);
      EXPECT_TRUE(all_close(host(conv2d_transpose(up.to(kGpu), k.to(kGpu), s, pad)),
                            conv2d_transpose(up, k, s, pad), 1e-4, 1e-4))
          << "conv2d_transpose " << pad << " stride " << s;
    }
}

TEST(CudaConv, NonContiguousInputsArePackedFirst) {
  SKIP_WITHOUT_GPU();
  const Tensor x = rand_tensor({2, 3, 6, 5}, 41), w = rand_tensor({4, 3, 3, 3}, 42);
  const Tensor xt = x.to(kGpu).transpose(2, 3).contiguous().transpose(2, 3);  // a strided view
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(all_close(host(conv2d(xt, w.to(kGpu), 1, "same")), conv2d(x, w, 1, "same"), 1e-10,
                        1e-10));
}

TEST(CudaConv, EmptyBatchGivesEmptyOutputAndZeroFilterGradient) {
  SKIP_WITHOUT_GPU();
  const Tensor x = zeros({0, 3, 5, 5}, DType::f32).to(kGpu);
  const Tensor w = rand_tensor({2, 3, 3, 3}, 43, -1, 1, DType::f32).to(kGpu);
  EXPECT_EQ(conv2d(x, w).shape(), Shape({0, 2, 3, 3}));
  const Tensor g = zeros({0, 2, 3, 3}, DType::f32).to(kGpu);
  EXPECT_TRUE(all_close(host(conv2d_backprop_filter(x, g, w.shape(), 1, "valid")),
                        zeros({2, 3, 3, 3}, DType::f32), 0, 0));
}

// ---- pooling -------------------------------------------------------------------------------------
namespace {

struct PoolCase {
  Shape x;
  Ints pool, st, pads;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}},    {{2, 3, 7, 9}, {2, 2}, {2, 2}, {0, 0, 0, 0}},
      {{2, 3, 5, 5}, {3, 2}, {2, 2}, {1, 1, 0, 1}},    {{1, 2, 7, 6}, {3, 3}, {2, 2}, {0, 1, 0, 1}},
      {{1, 2, 6, 5}, {3, 3}, {1, 1}, {1, 1, 1, 1}},    {{2, 1, 5, 7}, {2, 3}, {1, 2}, {1, 0, 2, 1}},
      {{1, 2, 8, 7}, {2, 2}, {3, 3}, {0, 0, 0, 0}},    {{4, 16, 33, 31}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {{1, 1, 4, 4}, {4, 4}, {1, 1}, {3, 0, 0, 3}},
  };
  return cases;
}

// Integers in [-2, 2] (ties everywhere), a NaN every 11th element when `nans`.
Tensor tie_heavy(const Shape& s, std::uint64_t seed, bool nans, DType dt) {
  Tensor r = rand_tensor(s, seed, -2.5, 2.5, DType::f64);
  std::vector<double> v = r.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i]);
    if (nans && i % 11 == 5) v[i] = std::nan("");
  }
  Tensor t = Tensor::empty(s, DType::f64);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t.cast(dt);
}

}  // namespace

// The same per-element functions in the same order as the CPU kernels: equal results, ties and
// NaN included, in every float dtype.
TEST(CudaPool, EveryPoolingOpMatchesTheCpuExactly) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const PoolCase& k : pool_cases())
      for (bool nans : {false, true}) {
        const std::string what = shape_str(k.x) + " pool " + shape_str(k.pool) + " strides " +
                                 shape_str(k.st) + " pads " + shape_str(k.pads) + " " +
                                 dtype_name(dt) + (nans ? " NaN" : "");
        const Attrs a = pool_attrs(k.pool, k.st, k.pads);
        const Tensor x = tie_heavy(k.x, 51, nans, dt);
        auto [y, gy] = both("max_pool2d", {x}, a);
        EXPECT_TRUE(same_values(gy, y)) << "max_pool2d " << what;
        const Tensor g = rand_tensor(y.shape(), 52, -1, 1, dt), h = rand_tensor(k.x, 53, -1, 1, dt);
        auto [dx, gdx] = both("max_pool2d_grad", {x, g}, a);
        EXPECT_TRUE(same_values(gdx, dx)) << "max_pool2d_grad " << what;
        auto [gg, ggg] = both("max_pool2d_grad_grad", {x, h}, a);
        EXPECT_TRUE(same_values(ggg, gg)) << "max_pool2d_grad_grad " << what;
        auto [av, gav] = both("avg_pool2d", {x}, a);
        EXPECT_TRUE(same_values(gav, av)) << "avg_pool2d " << what;
        auto [da, gda] = both("avg_pool2d_grad", {g}, Attrs(a).set("input_shape", Ints(k.x)));
        EXPECT_TRUE(same_values(gda, da)) << "avg_pool2d_grad " << what;
      }
}

TEST(CudaPool, PublicFunctionsWithSameAndValidPadding) {
  SKIP_WITHOUT_GPU();
  const Tensor x = rand_tensor({2, 3, 11, 8}, 54, -1, 1, DType::f32);
  const Tensor gx = x.to(kGpu);
  for (const char* pad : {"same", "valid"})
    for (std::int64_t s : {1, 2, 3}) {
      EXPECT_TRUE(same_values(host(max_pool2d(gx, 3, s, pad)), max_pool2d(x, 3, s, pad)))
          << pad << " " << s;
      EXPECT_TRUE(same_values(host(avg_pool2d(gx, {2, 3}, s, pad)), avg_pool2d(x, {2, 3}, s, pad)))
          << pad << " " << s;
    }
}

// ---- layers through GradientTape ----------------------------------------------------------------
namespace {

// d sum(layer(x) * r) / d x and / d each parameter, brought to the host.
std::vector<Tensor> layer_gradients(nn::Module& layer, const Tensor& x, const Tensor& r) {
  GradientTape tape(true);
  tape.watch(x);
  const Tensor loss = sum(layer(x) * r);
  std::vector<Tensor> out{host(tape.gradient(loss, x))};
  for (const Tensor& g : tape.gradient(loss, layer.parameters())) out.push_back(host(g));
  out.push_back(host(loss));
  return out;
}

// The layer on the CPU (built there), then moved to the GPU: same gradients.
void check_layer(nn::Module& layer, const Shape& xs, double tol, const std::string& what) {
  const Tensor x = rand_tensor(xs, 61);
  const Shape ys = layer.output_shape(xs);
  const Tensor r = rand_tensor(ys, 62);
  const auto cpu = layer_gradients(layer, x, r);
  layer.to(kGpu);
  const auto gpu = layer_gradients(layer, x.to(kGpu), r.to(kGpu));
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(all_close(gpu[i], cpu[i], tol, tol)) << what << " gradient " << i;
}

}  // namespace

TEST(CudaConvLayers, Conv2DGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  {
    nn::Conv2D c(5, 3, {.strides = 2, .padding = "same", .activation = nn::relu,
                        .dtype = DType::f64});
    check_layer(c, {2, 3, 9, 8}, 1e-10, "Conv2D same stride 2 relu");
  }
  {
    nn::Conv2D c(4, {3, 2}, {.padding = "valid", .dilation_rate = {2, 1}, .groups = 2,
                             .dtype = DType::f64});
    check_layer(c, {3, 4, 10, 7}, 1e-10, "Conv2D valid dilated grouped");
  }
  {
    nn::Conv2D c(4, 3, {.padding = "same", .use_bias = false, .dtype = DType::f64});
    check_layer(c, {1, 2, 6, 6}, 1e-10, "Conv2D same without bias");
  }
}

TEST(CudaConvLayers, PoolingGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  {
    nn::MaxPool2D p(3, 2, "same");
    check_layer(p, {2, 3, 9, 8}, 1e-12, "MaxPool2D 3 stride 2 same");
  }
  {
    nn::MaxPool2D p(2);
    check_layer(p, {2, 3, 8, 7}, 1e-12, "MaxPool2D 2");
  }
  {
    nn::AvgPool2D p({3, 3}, 2, "same");
    check_layer(p, {2, 3, 9, 8}, 1e-12, "AvgPool2D 3 stride 2 same");
  }
  {
    nn::AvgPool2D p(2);
    check_layer(p, {1, 2, 7, 6}, 1e-12, "AvgPool2D 2");
  }
}

TEST(CudaConvLayers, SecondOrderGradientsOfPoolingMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto run = [](Device d) {
    Tensor x = rand_tensor({1, 2, 7, 6}, 71).to(d);
    Tensor v = rand_tensor({1, 2, 4, 3}, 72).to(d);
    GradientTape outer;
    outer.watch(v);
    Tensor dx;
    {
      GradientTape inner;
      inner.watch(x);
      Tensor y = max_pool2d(x, 3, 2, "same") + avg_pool2d(x, 3, 2, "same");
      dx = inner.gradient(sum(y * v), x);
    }
    Tensor h = rand_tensor({1, 2, 7, 6}, 73).to(d);
    return host(outer.gradient(sum(dx * h), v));  // max_pool2d_grad_grad + avg_pool2d
  };
  EXPECT_TRUE(all_close(run(kGpu), run(Device::cpu()), 1e-12, 1e-12));
}

// ---- errors -------------------------------------------------------------------------------------
TEST(CudaConvErrors, IntegerInputsAreRefusedWithTheOpsName) {
  SKIP_WITHOUT_GPU();
  const Tensor x = zeros({1, 1, 4, 4}, DType::i32).to(kGpu);
  const Tensor w = zeros({1, 1, 3, 3}, DType::i32).to(kGpu);
  const std::string m = error_of([&] { call_op1(get_op("conv2d"), {x, w}, conv_attrs({1, 1}, {0, 0, 0, 0}, {1, 1}, 1)); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("i32"), std::string::npos) << m;
  const std::string p = error_of([&] { max_pool2d(x, 2); });
  EXPECT_NE(p.find("max_pool2d"), std::string::npos) << p;
}
