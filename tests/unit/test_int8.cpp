// The i8 dtype and quantization (issue 26): creation, promotion, arithmetic (wrapping, as NumPy
// and PyTorch), casts to and from every dtype (float -> i8 saturates with NaN -> 0, soma's rule
// for every integer dtype; integer -> i8 keeps the low byte, as NumPy and PyTorch), printing,
// weights files; quantize_linear / dequantize_linear per tensor and per channel (ONNX semantics:
// round half to even, saturate) and their per-element formulas over every index; matmul_integer.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../../src/ops/quantize_formulas.hpp"
#include "soma/model/weights.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<std::int64_t> ints(const Tensor& t) { return cast(t, DType::i64).to_vector<std::int64_t>(); }
Tensor i8(std::vector<std::int8_t> v) { return constant(v, {std::int64_t(v.size())}); }
Tensor u8(std::vector<std::uint8_t> v) { return constant(v, {std::int64_t(v.size())}); }
Tensor f64(std::vector<double> v) { return constant(v, {std::int64_t(v.size())}); }

// ---- the dtype -----------------------------------------------------------------------------

TEST(Int8DType, SizeNameCategory) {
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_STREQ(dtype_name(DType::i8), "i8");
  EXPECT_TRUE(is_integral(DType::i8));
  EXPECT_FALSE(is_floating(DType::i8));
  static_assert(dtype_v<std::int8_t> == DType::i8);
  EXPECT_EQ(kNumDTypes, 9);
}

TEST(Int8DType, PromotesLikeNumPyWithinSomasDTypes) {
  EXPECT_EQ(promote_types(DType::i8, DType::i8), DType::i8);
  EXPECT_EQ(promote_types(DType::i8, DType::boolean), DType::i8);
  // NumPy and PyTorch give int16, which soma lacks: the next signed type holding both.
  EXPECT_EQ(promote_types(DType::i8, DType::u8), DType::i32);
  EXPECT_EQ(promote_types(DType::u8, DType::i8), DType::i32);
  EXPECT_EQ(promote_types(DType::i8, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::i8, DType::i64), DType::i64);
  EXPECT_EQ(promote_types(DType::i8, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::i8, DType::bf16), DType::bf16);
  EXPECT_EQ(promote_types(DType::i8, DType::f32), DType::f32);
  EXPECT_EQ(promote_types(DType::f64, DType::i8), DType::f64);
  EXPECT_EQ((i8({1}) + u8({2})).dtype(), DType::i32);
}

TEST(Int8DType, Creation) {
  Tensor c = constant<std::int8_t>({-128, 0, 127});
  EXPECT_EQ(c.dtype(), DType::i8);
  EXPECT_EQ(c.to_vector<std::int8_t>(), (std::vector<std::int8_t>{-128, 0, 127}));
  EXPECT_EQ(ints(zeros({2}, DType::i8)), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(ints(ones({2}, DType::i8)), (std::vector<std::int64_t>{1, 1}));
  // Doubles convert as every float -> integer conversion does: saturating, NaN -> 0.
  EXPECT_EQ(scalar(1000.0, DType::i8).item<std::int64_t>(), 127);
  EXPECT_EQ(scalar(-1000.0, DType::i8).item<std::int64_t>(), -128);
  EXPECT_EQ(scalar(kNaN, DType::i8).item<std::int64_t>(), 0);
  EXPECT_EQ(scalar(-7.9, DType::i8).item<std::int64_t>(), -7);
  EXPECT_EQ(c.at<std::int8_t>({2}), 127);
}

TEST(Int8DType, ArithmeticWrapsLikeNumPy) {
  const Tensor a = i8({100, -100, -128, 7, -7});
  const Tensor b = i8({100, 100, -1, 2, 2});
  EXPECT_EQ((a + b).dtype(), DType::i8);
  EXPECT_EQ(ints(a + b), (std::vector<std::int64_t>{-56, 0, 127, 9, -5}));
  EXPECT_EQ(ints(a - b), (std::vector<std::int64_t>{0, 56, -127, 5, -9}));
  EXPECT_EQ(ints(a * b), (std::vector<std::int64_t>{16, -16, -128, 14, -14}));
  EXPECT_EQ(ints(floor_div(a, b)), (std::vector<std::int64_t>{1, -1, -128, 3, -4}));
  EXPECT_EQ(ints(mod(a, b)), (std::vector<std::int64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(ints(negative(a)), (std::vector<std::int64_t>{-100, 100, -128, -7, 7}));
  EXPECT_EQ(ints(abs(a)), (std::vector<std::int64_t>{100, 100, -128, 7, 7}));
  EXPECT_EQ(ints(maximum(a, b)), (std::vector<std::int64_t>{100, 100, -1, 7, 2}));
  EXPECT_EQ(ints(cast(less(a, b), DType::i64)), (std::vector<std::int64_t>{0, 1, 1, 0, 1}));
  EXPECT_EQ(ints(floor_div(a, i8({0, 0, 0, 0, 0}))), (std::vector<std::int64_t>{0, 0, 0, 0, 0}));
}

TEST(Int8DType, CastsFromFloatsSaturateWithNaNToZero) {
  const std::vector<double> v = {2.9, -2.9, 300.0, -300.0, kNaN, kInf, -kInf, 127.0, -128.0, -0.5};
  const std::vector<std::int64_t> want = {2, -2, 127, -128, 0, 127, -128, 127, -128, 0};
  for (DType from : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(from));
    Tensor x = cast(f64(v), from);
    EXPECT_EQ(ints(cast(x, DType::i8)), want);
    EXPECT_EQ(ints(cast(testing::noncontiguous(x), DType::i8)), want);
  }
}

TEST(Int8DType, CastsFromIntegersKeepTheLowByte) {
  const std::vector<std::int64_t> want = {44, 127, -56, -1, 0};
  EXPECT_EQ(ints(cast(constant<std::int32_t>({300, -129, 200, -1, 256}), DType::i8)), want);
  EXPECT_EQ(ints(cast(constant<std::int64_t>({300, -129, 200, -1, 256}), DType::i8)), want);
  EXPECT_EQ(ints(cast(u8({200, 127, 255, 0}), DType::i8)), (std::vector<std::int64_t>{-56, 127, -1, 0}));
  EXPECT_EQ(ints(cast(constant({true, false}), DType::i8)), (std::vector<std::int64_t>{1, 0}));
}

TEST(Int8DType, CastsToEveryDType) {
  const Tensor x = i8({-128, -1, 0, 1, 127});
  for (DType to : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(to));
    Tensor y = cast(x, to);
    EXPECT_EQ(y.dtype(), to);
    EXPECT_EQ(cast(y, DType::f64).to_vector<double>(), (std::vector<double>{-128, -1, 0, 1, 127}));
    EXPECT_EQ(ints(cast(y, DType::i8)), ints(x)) << "round trip";
  }
  EXPECT_EQ(ints(cast(x, DType::u8)), (std::vector<std::int64_t>{128, 255, 0, 1, 127}));
  EXPECT_EQ(ints(cast(cast(x, DType::boolean), DType::i64)), (std::vector<std::int64_t>{1, 1, 0, 1, 1}));
}

TEST(Int8DType, Prints) {
  const std::string s = i8({-128, 5}).str();
  EXPECT_EQ(s, "tensor([-128,    5], shape=[2], dtype=i8)");
}

TEST(Int8DType, WeightsFileRoundTrip) {
  const auto path = (std::filesystem::temp_directory_path() / "soma_test_int8.wts").string();
  const Tensor x = constant(std::vector<std::int8_t>{-128, -3, 0, 9, 127, 1}, {2, 3});
  model::write_weights_file(path, {{"q", x}});
  auto back = model::read_weights_file(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.count("q"), 1u);
  EXPECT_EQ(back["q"].dtype(), DType::i8);
  EXPECT_EQ(back["q"].shape(), (Shape{2, 3}));
  EXPECT_EQ(ints(back["q"]), ints(x));
}

// ---- quantization ------------------------------------------------------------------------

TEST(QuantizeLinear, PerTensorRoundsHalfToEvenAndSaturates) {
  const Tensor x = f64({0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0, kNaN, kInf, -kInf, 0.26});
  const Tensor q = quantize_linear(cast(x, DType::f32), scalar(0.5), i8({0}).reshape({}));
  EXPECT_EQ(q.dtype(), DType::i8);
  EXPECT_EQ(ints(q), (std::vector<std::int64_t>{1, 3, 5, -1, -3, 127, -128, 0, 127, -128, 1}));
  // x / 1: the ties go to the even integer; u8 with zero point 128.
  const Tensor u = quantize_linear(x, scalar(1.0, DType::f64), u8({128}).reshape({}));
  EXPECT_EQ(u.dtype(), DType::u8);
  EXPECT_EQ(ints(u), (std::vector<std::int64_t>{128, 130, 130, 128, 126, 255, 0, 128, 255, 0, 128}));
}

TEST(QuantizeLinear, PerChannelAlongAnyAxis) {
  const Tensor x = constant<float>({{1.f, 2.f, 3.f}, {-1.f, -2.f, -3.f}});
  const Tensor s = constant<float>({1.f, 0.5f});
  const Tensor q0 = quantize_linear(x, s, u8({10, 20}), 0);
  EXPECT_EQ(ints(q0), (std::vector<std::int64_t>{11, 12, 13, 18, 16, 14}));
  const Tensor q1 = quantize_linear(x, constant<float>({1.f, 2.f, 4.f}), i8({0, 1, -1}), -1);
  EXPECT_EQ(ints(q1), (std::vector<std::int64_t>{1, 2, 0, -1, 0, -2}));
  // One scale in a 1-d tensor is per tensor whatever the axis.
  EXPECT_EQ(ints(quantize_linear(x, constant<float>({2.f}), i8({0}))),
            (std::vector<std::int64_t>{0, 1, 2, 0, -1, -2}));
}

TEST(QuantizeLinear, DequantizeInvertsOnTheGrid) {
  const Tensor q = constant(std::vector<std::int8_t>{-128, -1, 0, 5, 127, 3}, {2, 3});
  const Tensor x = dequantize_linear(q, constant<float>({0.5f, 2.f}), i8({1, -1}), 0);
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_TRUE(testing::all_close(x, std::vector<double>{-64.5, -1, -0.5, 12, 256, 8}, 0, 0));
  EXPECT_EQ(ints(quantize_linear(x, constant<float>({0.5f, 2.f}), i8({1, -1}), 0)), ints(q));
  const Tensor big = dequantize_linear(constant<std::int32_t>({1 << 20, -5}), scalar(0.25, DType::f64),
                                       constant(std::vector<std::int32_t>{0}, Shape{}));
  EXPECT_TRUE(testing::all_close(big, std::vector<double>{262144.0, -1.25}, 0, 0));
  EXPECT_EQ(dequantize_linear(u8({3}), constant({Half(1.0f)}), u8({1})).dtype(), DType::f16);
}

TEST(QuantizeLinear, RefusesWhatItCannotRun) {
  const Tensor x = zeros({2, 3});
  auto refuses = [](auto&& f, const std::string& part) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error, expected one mentioning '" << part << "'";
  };
  refuses([&] { quantize_linear(x, zeros({4}), zeros({4}, DType::u8), 1); }, "along axis 1");
  refuses([&] { quantize_linear(x, zeros({3}), zeros({3}, DType::i32), 1); }, "u8 or i8");
  refuses([&] { quantize_linear(x, zeros({3}, DType::f64), zeros({3}, DType::u8)); }, "scale has dtype f64");
  refuses([&] { dequantize_linear(x, zeros({3}), zeros({3}), 1); }, "u8, i8 or i32");
  refuses([&] { dequantize_linear(zeros({3}, DType::u8), zeros({3}), zeros({3}, DType::i8), 0); },
          "zero_point has dtype i8");
}

// The example of docs/cpp-api.md: symmetric per-row i8 weights, back within half a step.
TEST(QuantizeLinear, PerRowWeightsRoundTripWithinHalfAStep) {
  const Tensor w = testing::rand_tensor({64, 128}, 7, -3, 3, DType::f32);
  const Tensor scale = max(abs(w), {1}) / 127.0;
  const Tensor q = quantize_linear(w, scale, zeros({64}, DType::i8), 0);
  const Tensor back = dequantize_linear(q, scale, zeros({64}, DType::i8), 0);
  const Tensor err = abs(back - w) - reshape(scale, {64, 1}) * 0.5;
  EXPECT_LE(max(err).item<double>(), 1e-6);
  EXPECT_EQ(max(abs(cast(q, DType::i32))).item<std::int64_t>(), 127);
}

TEST(QuantizeLinear, NotDifferentiable) {
  const OpDef& q = get_op("quantize_linear");
  const OpDef& d = get_op("dequantize_linear");
  EXPECT_EQ(q.grad, nullptr);
  EXPECT_EQ(d.grad, nullptr);
  EXPECT_EQ(q.onnx.op_type, "QuantizeLinear");
  EXPECT_EQ(d.onnx.op_type, "DequantizeLinear");
}

// The formulas the CPU and CUDA kernels share, over every index of a [2, 3, 4] tensor and every
// axis, against a multi-index computation.
TEST(QuantizeFormulas, ChannelIndexOverEveryIndexAndAxis) {
  const Shape shape = {2, 3, 4};
  for (int axis = 0; axis < 3; ++axis) {
    const auto ch = quant::ChannelIndex::make(shape.data(), 3, axis, shape[std::size_t(axis)]);
    for (std::int64_t i = 0; i < 24; ++i)
      EXPECT_EQ(ch(i), testing::unravel(i, shape)[std::size_t(axis)]) << "axis " << axis << " i " << i;
  }
  const auto per_tensor = quant::ChannelIndex::make(shape.data(), 3, 1, 1);
  for (std::int64_t i = 0; i < 24; ++i) EXPECT_EQ(per_tensor(i), 0);
}

TEST(QuantizeFormulas, RoundHalfEvenAgreesWithNearbyint) {
  for (double v = -300.0; v <= 300.0; v += 0.25) {
    EXPECT_EQ(quant::round_half_even(v), std::nearbyint(v)) << v;
    EXPECT_EQ(quant::round_half_even(float(v)), std::nearbyint(float(v))) << v;
  }
  EXPECT_EQ(quant::quantize_value<std::int8_t>(kInf, 0), 127);
  EXPECT_EQ(quant::quantize_value<std::int8_t>(-kInf, 0), -128);
  EXPECT_EQ(quant::quantize_value<std::uint8_t>(kNaN, 7), 7);
  EXPECT_EQ(quant::quantize_value<std::uint8_t>(-0.5f, 0), 0);
  EXPECT_EQ(quant::quantize_value<std::uint8_t>(254.5, 0), 254);
  EXPECT_EQ(quant::quantize_value<std::uint8_t>(255.5, 0), 255);
}

TEST(MatMulInteger, SubtractsZeroPointsAndAccumulatesInI32) {
  const Tensor a = constant(std::vector<std::uint8_t>{11, 7, 3, 10, 6, 2}, {2, 3});
  const Tensor b = constant(std::vector<std::int8_t>{1, -4, 2, 5, -3, 6}, {3, 2});
  // a - [1, 2] per row: [[10, 6, 2], [8, 4, 0]]; b - [0, 1] per column: [[1, -5], [2, 4], [-3, 5]]
  const Tensor y = matmul_integer(a, b, u8({1, 2}), i8({0, 1}));
  EXPECT_EQ(y.dtype(), DType::i32);
  EXPECT_EQ(ints(y), (std::vector<std::int64_t>{16, -16, 16, -24}));
  // 255 * 127 * 200 overflows i16 but not i32.
  const Tensor big = matmul_integer(constant(std::vector<std::uint8_t>(200, 255), {1, 200}),
                                    constant(std::vector<std::int8_t>(200, 127), {200, 1}),
                                    constant(std::vector<std::uint8_t>{0}, Shape{}),
                                    constant(std::vector<std::int8_t>{0}, Shape{}));
  EXPECT_EQ(ints(big), (std::vector<std::int64_t>{255 * 127 * 200}));
}

TEST(QuantizeLinear, CudaMatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Tensor x = testing::rand_tensor({5, 7}, 3, -40, 40, DType::f32);
  const Tensor s = testing::rand_tensor({7}, 4, 0.1, 2, DType::f32);
  const Tensor z = cast(testing::rand_tensor({7}, 5, -100, 100), DType::i8);
  const Device gpu = Device::cuda(0);
  const Tensor q = quantize_linear(x.to(gpu), s.to(gpu), z.to(gpu), 1);
  EXPECT_EQ(ints(q.to(Device::cpu())), ints(quantize_linear(x, s, z, 1)));
  const Tensor back = dequantize_linear(q, s.to(gpu), z.to(gpu), 1).to(Device::cpu());
  EXPECT_TRUE(testing::all_close(back, dequantize_linear(q.to(Device::cpu()), s, z, 1), 0, 0));
}

}  // namespace
}  // namespace soma
