// Quantization op definitions (ONNX QuantizeLinear / DequantizeLinear): quantize_linear and
// dequantize_linear, per tensor or per channel, and the composite matmul_integer. The formulas
// are src/ops/quantize_formulas.hpp; the kernels live in src/backend/cpu/quantize.cpp and
// src/backend/cuda/quantize.cpp. Integer-valued: no gradient.
#include <algorithm>
#include <cmath>

#include "internal/registration.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

bool is_quantized_dtype(DType t) { return t == DType::u8 || t == DType::i8; }

// Checks scale and zero point against x (what ONNX allows: one value, or one per index of x
// along `axis`); `axis` only matters for the per-channel form.
void check_params(const char* op, const TensorSpec& x, const TensorSpec& scale,
                  const TensorSpec& zp, std::int64_t axis) {
  if (!is_floating(scale.dtype))
    fail(op, "scale must have a floating dtype, got ", dtype_name(scale.dtype));
  if (scale.shape.size() > 1)
    fail(op, "scale must be a scalar or 1-d (per channel), got shape ", shape_str(scale.shape));
  if (zp.shape != scale.shape)
    fail(op, "zero_point has shape ", shape_str(zp.shape), " but scale has shape ",
         shape_str(scale.shape), " (they must match)");
  const std::int64_t n = numel(scale.shape);
  if (scale.shape.empty() || n == 1) return;  // per tensor
  const int ax = normalize_axis(axis, std::int64_t(x.shape.size()), op);
  if (x.shape[std::size_t(ax)] != n)
    fail(op, "per-channel scale of shape ", shape_str(scale.shape), " does not match x's shape ",
         shape_str(x.shape), " along axis ", ax, " (expected ", x.shape[std::size_t(ax)],
         " values)");
}

std::vector<TensorSpec> quantize_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* op = "quantize_linear";
  if (!is_floating(in[0].dtype))
    fail(op, "x must have a floating dtype, got ", dtype_name(in[0].dtype));
  if (in[1].dtype != in[0].dtype)
    fail(op, "scale has dtype ", dtype_name(in[1].dtype), " but x has ", dtype_name(in[0].dtype),
         " (they must match)");
  if (!is_quantized_dtype(in[2].dtype))
    fail(op, "zero_point must be u8 or i8 (it gives the output dtype), got ",
         dtype_name(in[2].dtype));
  check_params(op, in[0], in[1], in[2], a.i("axis"));
  return {{in[0].shape, in[2].dtype}};
}

std::vector<TensorSpec> dequantize_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* op = "dequantize_linear";
  const DType q = in[0].dtype;
  if (!is_quantized_dtype(q) && q != DType::i32)
    fail(op, "x must be u8, i8 or i32, got ", dtype_name(q));
  if (in[2].dtype != q)
    fail(op, "zero_point has dtype ", dtype_name(in[2].dtype), " but x has ", dtype_name(q),
         " (they must match)");
  check_params(op, in[0], in[1], in[2], a.i("axis"));
  return {{in[0].shape, in[1].dtype}};
}

// ---- references (f64, independent of the kernels) ----
// Which scale index flat index i of a row-major `shape` uses.
std::int64_t channel_of(const Shape& shape, const Tensor& scale, std::int64_t axis,
                        std::int64_t i) {
  if (scale.numel() == 1) return 0;
  const int ax = normalize_axis(axis, std::int64_t(shape.size()), "reference");
  std::int64_t inner = 1;
  for (std::size_t d = std::size_t(ax) + 1; d < shape.size(); ++d) inner *= shape[d];
  return (i / inner) % shape[std::size_t(ax)];
}

std::vector<Tensor> quantize_reference(const std::vector<Tensor>& in, const Attrs& a) {
  quantize_infer({{in[0].shape(), in[0].dtype()}, {in[1].shape(), in[1].dtype()},
                  {in[2].shape(), in[2].dtype()}},
                 a);
  const auto x = in[0].to_vector<double>(), s = in[1].to_vector<double>(),
             z = in[2].to_vector<double>();
  const bool is_signed = in[2].dtype() == DType::i8;
  const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = std::size_t(channel_of(in[0].shape(), in[1], a.i("axis"), std::int64_t(i)));
    double q = x[i] / s[c];
    if (std::isnan(q)) q = 0;
    // Half to even: nearbyint in the default rounding mode.
    out[i] = std::clamp(std::nearbyint(q) + z[c], lo, hi);
  }
  return {cast(constant(out, in[0].shape()), in[2].dtype())};
}

std::vector<Tensor> dequantize_reference(const std::vector<Tensor>& in, const Attrs& a) {
  dequantize_infer({{in[0].shape(), in[0].dtype()}, {in[1].shape(), in[1].dtype()},
                    {in[2].shape(), in[2].dtype()}},
                   a);
  const auto x = in[0].to_vector<double>(), s = in[1].to_vector<double>(),
             z = in[2].to_vector<double>();
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = std::size_t(channel_of(in[0].shape(), in[1], a.i("axis"), std::int64_t(i)));
    out[i] = (x[i] - z[c]) * s[c];
  }
  return {cast(constant(out, in[0].shape()), in[1].dtype())};
}

}  // namespace

namespace detail {
void register_quantize_ops() {
  // Scale in [-3, 3]: small scales saturate, negative ones flip the sign; the zero points cover
  // u8's whole range (i8 is tested in tests/unit/test_int8.cpp).
  register_op({.name = "quantize_linear", .num_inputs = 3, .infer = quantize_infer,
               .grad = nullptr, .attrs = {{"axis", std::int64_t(1)}},
               .onnx = {.op_type = "QuantizeLinear", .min_opset = 13, .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{3, 4}, {4}, {4}}, .lo = -3, .hi = 3,
                        .attrs = {{"axis", std::int64_t(1)}}, .reference = quantize_reference,
                        .gradcheck = false, .fixed_inputs = {{2, DType::u8, 0, 255}}}});
  register_op({.name = "dequantize_linear", .num_inputs = 3, .infer = dequantize_infer,
               .grad = nullptr, .attrs = {{"axis", std::int64_t(1)}},
               .onnx = {.op_type = "DequantizeLinear", .min_opset = 13,
                        .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{3, 4}, {3}, {3}}, .attrs = {{"axis", std::int64_t(0)}},
                        .reference = dequantize_reference, .gradcheck = false,
                        .fixed_inputs = {{0, DType::i8, -128, 127}, {2, DType::i8, -128, 127}}}});
}
}  // namespace detail

// ---- public functions ----
Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                       std::int64_t axis) {
  static const OpDef& d = get_op("quantize_linear");
  return call_op1(d, {x, scale, zero_point}, {{"axis", axis}});
}

Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const Tensor& zero_point,
                         std::int64_t axis) {
  static const OpDef& d = get_op("dequantize_linear");
  return call_op1(d, {q, scale, zero_point}, {{"axis", axis}});
}

Tensor matmul_integer(const Tensor& a, const Tensor& b, const Tensor& a_zero_point,
                      const Tensor& b_zero_point) {
  const char* op = "matmul_integer";
  for (const Tensor* t : {&a, &b, &a_zero_point, &b_zero_point})
    if (!t->defined() || !is_quantized_dtype(t->dtype()))
      fail(op, "expects u8 or i8 operands and zero points, got ",
           t->defined() ? dtype_name(t->dtype()) : "an undefined tensor");
  if (a_zero_point.dtype() != a.dtype() || b_zero_point.dtype() != b.dtype())
    fail(op, "a zero point must have its operand's dtype (a ", dtype_name(a.dtype()),
         ", a_zero_point ", dtype_name(a_zero_point.dtype()), ", b ", dtype_name(b.dtype()),
         ", b_zero_point ", dtype_name(b_zero_point.dtype()), ")");
  if (a_zero_point.rank() > 1 || b_zero_point.rank() > 1)
    fail(op, "zero points must be scalars or 1-d, got shapes ", shape_str(a_zero_point.shape()),
         " and ", shape_str(b_zero_point.shape()));
  // A per-row zero point of a ([M]) subtracts along a's rows: make it [M, 1].
  Tensor azp = cast(a_zero_point, DType::i32);
  if (azp.rank() == 1 && azp.numel() > 1) azp = reshape(azp, {azp.numel(), 1});
  const Tensor a32 = cast(a, DType::i32) - azp;
  const Tensor b32 = cast(b, DType::i32) - cast(b_zero_point, DType::i32);
  return matmul(a32, b32);
}

}  // namespace soma
