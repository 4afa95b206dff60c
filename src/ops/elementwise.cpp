// Elementwise op definitions: shape/dtype rules, gradients (written with ops) and the public
// functions. Binary ops broadcast (NumPy rules); the public functions promote mixed dtypes.
#include <cmath>
#include <numbers>

#include "internal/registration.hpp"
#include "internal/relu_gradient.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

std::vector<TensorSpec> binary_infer_impl(const std::vector<TensorSpec>& in, const char* op,
                                          bool predicate) {
  if (in[0].dtype != in[1].dtype)
    fail(op, "dtypes differ: ", dtype_name(in[0].dtype), " and ", dtype_name(in[1].dtype));
  return {{broadcast_shapes(in[0].shape, in[1].shape, op), predicate ? DType::boolean : in[0].dtype}};
}

// Each op's infer function needs its own name for messages; a template per name does it.
template <const char* Name, bool Predicate>
std::vector<TensorSpec> binary_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return binary_infer_impl(in, Name, Predicate);
}
std::vector<TensorSpec> unary_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return {in[0]};
}
std::vector<TensorSpec> where_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  if (in[0].dtype != DType::boolean)
    fail("where", "condition must have dtype bool, got ", dtype_name(in[0].dtype));
  if (in[1].dtype != in[2].dtype)
    fail("where", "branches have different dtypes: ", dtype_name(in[1].dtype), " and ",
         dtype_name(in[2].dtype));
  Shape s = broadcast_shapes(in[0].shape, in[1].shape, "where");
  return {{broadcast_shapes(s, in[2].shape, "where"), in[1].dtype}};
}

Tensor like_scalar(double v, const Tensor& t) { return scalar(v, t.dtype()); }

// ---- gradients ----
using G = const GradContext&;
// Binary gradients compute only the sides some gradient request needs (c.needs(i)): a bias
// add's data side, a constant factor's side, ... cost nothing then.
std::vector<Tensor> add_grad(G c) {
  return {c.needs(0) ? sum_to(c.grads[0], c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(c.grads[0], c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> sub_grad(G c) {
  return {c.needs(0) ? sum_to(c.grads[0], c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(negative(c.grads[0]), c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> mul_grad(G c) {
  const Tensor& g = c.grads[0];
  return {c.needs(0) ? sum_to(g * c.inputs[1], c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(g * c.inputs[0], c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> div_grad(G c) {
  const Tensor &g = c.grads[0], &a = c.inputs[0], &b = c.inputs[1];
  return {c.needs(0) ? sum_to(g / b, a.shape()) : Tensor(),
          c.needs(1) ? sum_to(negative(g) * a / square(b), b.shape()) : Tensor()};
}
std::vector<Tensor> pow_grad(G c) {
  const Tensor &g = c.grads[0], &a = c.inputs[0], &b = c.inputs[1], &out = c.outputs[0];
  Tensor da, db;
  if (c.needs(0)) da = sum_to(g * b * pow(a, b - 1.0), a.shape());
  if (c.needs(1)) {
    // d/db a^b = a^b log a, taken as 0 where a <= 0 (as TensorFlow does).
    Tensor safe_log = where(a > 0.0, log(where(a > 0.0, a, ones_like(a))), zeros_like(a));
    db = sum_to(g * out * safe_log, b.shape());
  }
  return {da, db};
}
std::vector<Tensor> maximum_grad(G c) {
  Tensor mask = c.inputs[0] >= c.inputs[1];  // ties go to the first input
  Tensor z = zeros_like(c.grads[0]);
  return {c.needs(0) ? sum_to(where(mask, c.grads[0], z), c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(where(mask, z, c.grads[0]), c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> minimum_grad(G c) {
  Tensor mask = c.inputs[0] <= c.inputs[1];
  Tensor z = zeros_like(c.grads[0]);
  return {c.needs(0) ? sum_to(where(mask, c.grads[0], z), c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(where(mask, z, c.grads[0]), c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> sqdiff_grad(G c) {
  Tensor d = c.grads[0] * (c.inputs[0] - c.inputs[1]) * 2.0;
  return {c.needs(0) ? sum_to(d, c.inputs[0].shape()) : Tensor(),
          c.needs(1) ? sum_to(negative(d), c.inputs[1].shape()) : Tensor()};
}
std::vector<Tensor> floor_div_grad(G c) {
  return {zeros_like(c.inputs[0]), zeros_like(c.inputs[1])};
}
std::vector<Tensor> mod_grad(G c) {
  const Tensor &g = c.grads[0], &a = c.inputs[0], &b = c.inputs[1];
  return {sum_to(g, a.shape()), sum_to(negative(g) * floor_div(a, b), b.shape())};
}
std::vector<Tensor> where_grad(G c) {
  const Tensor& g = c.grads[0];
  Tensor z = zeros_like(g);
  return {Tensor(), c.needs(1) ? sum_to(where(c.inputs[0], g, z), c.inputs[1].shape()) : Tensor(),
          c.needs(2) ? sum_to(where(c.inputs[0], z, g), c.inputs[2].shape()) : Tensor()};
}
std::vector<Tensor> zero_grad(G c) { return {zeros_like(c.inputs[0])}; }
std::vector<Tensor> abs_grad(G c) { return {c.grads[0] * sign(c.inputs[0])}; }
std::vector<Tensor> neg_grad(G c) { return {negative(c.grads[0])}; }
std::vector<Tensor> square_grad(G c) { return {c.grads[0] * c.inputs[0] * 2.0}; }
std::vector<Tensor> reciprocal_grad(G c) { return {negative(c.grads[0]) * square(c.outputs[0])}; }
std::vector<Tensor> sqrt_grad(G c) { return {c.grads[0] * 0.5 / c.outputs[0]}; }
std::vector<Tensor> rsqrt_grad(G c) {
  return {c.grads[0] * -0.5 * c.outputs[0] * square(c.outputs[0])};
}
std::vector<Tensor> exp_grad(G c) { return {c.grads[0] * c.outputs[0]}; }
std::vector<Tensor> log_grad(G c) { return {c.grads[0] / c.inputs[0]}; }
std::vector<Tensor> log1p_grad(G c) { return {c.grads[0] / (c.inputs[0] + 1.0)}; }
std::vector<Tensor> expm1_grad(G c) { return {c.grads[0] * (c.outputs[0] + 1.0)}; }
std::vector<Tensor> sin_grad(G c) { return {c.grads[0] * cos(c.inputs[0])}; }
std::vector<Tensor> cos_grad(G c) { return {negative(c.grads[0]) * sin(c.inputs[0])}; }
std::vector<Tensor> tanh_grad(G c) { return {c.grads[0] * (1.0 - square(c.outputs[0]))}; }
std::vector<Tensor> erf_grad(G c) {
  return {c.grads[0] * (2.0 / std::sqrt(std::numbers::pi)) * exp(negative(square(c.inputs[0])))};
}
std::vector<Tensor> sigmoid_grad(G c) {
  return {c.grads[0] * c.outputs[0] * (1.0 - c.outputs[0])};
}
using detail::relu_gradient;
std::vector<Tensor> relu_grad(G c) { return {relu_gradient(c.inputs[0], c.grads[0])}; }
// d/dg of relu_grad(x, g) is the same mask; x only selects, so it gets no gradient.
std::vector<Tensor> relu_grad_grad(G c) {
  return {Tensor(), c.needs(1) ? relu_gradient(c.inputs[0], c.grads[0]) : Tensor()};
}
std::vector<Tensor> leaky_relu_grad(G c) {
  return {where(c.inputs[0] > 0.0, c.grads[0], c.grads[0] * c.attrs.f("alpha"))};
}
// As PyTorch's: the x <= 0 branch only where x <= 0, so g passes where x is NaN.
std::vector<Tensor> elu_grad(G c) {
  return {where(c.inputs[0] <= 0.0, c.grads[0] * (c.outputs[0] + c.attrs.f("alpha")), c.grads[0])};
}
std::vector<Tensor> softplus_grad(G c) { return {c.grads[0] * sigmoid(c.inputs[0])}; }

#define SOMA_NAME(N) constexpr char N##_name[] = #N;
SOMA_NAME(add) SOMA_NAME(subtract) SOMA_NAME(multiply) SOMA_NAME(divide) SOMA_NAME(floor_div)
SOMA_NAME(mod) SOMA_NAME(pow) SOMA_NAME(maximum) SOMA_NAME(minimum) SOMA_NAME(squared_difference)
SOMA_NAME(equal) SOMA_NAME(not_equal) SOMA_NAME(less) SOMA_NAME(less_equal) SOMA_NAME(greater)
SOMA_NAME(greater_equal) SOMA_NAME(logical_and) SOMA_NAME(logical_or) SOMA_NAME(relu_grad)
#undef SOMA_NAME

void check_floating(const Tensor& t, const char* op) {
  if (!is_floating(t.dtype()))
    fail(op, "dtype ", dtype_name(t.dtype()), " is not supported (expected f32, f64, f16 or bf16)");
}
void check_bool(const Tensor& t, const char* op) {
  if (t.dtype() != DType::boolean)
    fail(op, "expected a bool tensor, got dtype ", dtype_name(t.dtype()),
         " (compare first, or cast(t, DType::boolean))");
}
void check_not_bool(const Tensor& t, const char* op) {
  if (t.dtype() == DType::boolean)
    fail(op, "dtype bool is not supported (cast to a numeric dtype first)");
}

Tensor binary(const OpDef& d, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail(d.name, "an input is an undefined Tensor");
  // Same dtypes (the usual case): no cast calls, no temporaries (issue 5, per-op overhead).
  if (a.dtype() == b.dtype()) return call_op1(d, {a, b});
  DType t = promote_types(a.dtype(), b.dtype());
  return call_op1(d, {cast(a, t), cast(b, t)});
}
// The definition for a name, looked up once per op rather than per call.
template <const char* Name>
const OpDef& def_of() {
  static const OpDef& d = get_op(Name);
  return d;
}

Tensor unary(const OpDef& d, const Tensor& t, const Attrs& attrs = {}) {
  return call_op1(d, {t}, attrs);
}

}  // namespace

namespace detail {

// relu's gradient as one op: the mask-where-zeros composition below made three passes over
// memory and two temporaries per activation (8% of a LeNet training step, issue 5). Same values:
// 0 where x <= 0, whatever g holds there, else g (also where x is NaN: PyTorch's
// threshold_backward). The CPU has a kernel for it; other devices keep the composition.
Tensor relu_gradient(const Tensor& x, const Tensor& g) {
  if (x.device().is_cpu() && g.device().is_cpu() && x.dtype() == g.dtype()) {
    static const OpDef& d = get_op("relu_grad");
    return call_op1(d, {x, g});
  }
  return where(x <= 0.0, zeros_like(g), g);
}

void register_view_ops();

void register_elementwise_ops() {
  register_view_ops();
  auto bin = [](const char* name, InferFn infer, GradFn grad) {
    register_op({.name = name, .num_inputs = 2, .infer = infer, .grad = grad});
  };
  bin("add", binary_infer<add_name, false>, add_grad);
  bin("subtract", binary_infer<subtract_name, false>, sub_grad);
  bin("multiply", binary_infer<multiply_name, false>, mul_grad);
  bin("divide", binary_infer<divide_name, false>, div_grad);
  bin("floor_div", binary_infer<floor_div_name, false>, floor_div_grad);
  bin("mod", binary_infer<mod_name, false>, mod_grad);
  bin("pow", binary_infer<pow_name, false>, pow_grad);
  bin("maximum", binary_infer<maximum_name, false>, maximum_grad);
  bin("minimum", binary_infer<minimum_name, false>, minimum_grad);
  bin("squared_difference", binary_infer<squared_difference_name, false>, sqdiff_grad);
  bin("equal", binary_infer<equal_name, true>, nullptr);
  bin("not_equal", binary_infer<not_equal_name, true>, nullptr);
  bin("less", binary_infer<less_name, true>, nullptr);
  bin("less_equal", binary_infer<less_equal_name, true>, nullptr);
  bin("greater", binary_infer<greater_name, true>, nullptr);
  bin("greater_equal", binary_infer<greater_equal_name, true>, nullptr);
  bin("logical_and", binary_infer<logical_and_name, false>, nullptr);
  bin("logical_or", binary_infer<logical_or_name, false>, nullptr);
  register_op({.name = "where", .num_inputs = 3, .infer = where_infer, .grad = where_grad});
  bin("relu_grad", binary_infer<relu_grad_name, false>, relu_grad_grad);  // (x, g): g * [x > 0]
  auto un = [](const char* name, GradFn grad) {
    register_op({.name = name, .num_inputs = 1, .infer = unary_infer, .grad = grad});
  };
  un("abs", abs_grad);
  un("negative", neg_grad);
  un("sign", zero_grad);
  un("square", square_grad);
  un("reciprocal", reciprocal_grad);
  un("sqrt", sqrt_grad);
  un("rsqrt", rsqrt_grad);
  un("exp", exp_grad);
  un("log", log_grad);
  un("log1p", log1p_grad);
  un("expm1", expm1_grad);
  un("sin", sin_grad);
  un("cos", cos_grad);
  un("tanh", tanh_grad);
  un("erf", erf_grad);
  un("sigmoid", sigmoid_grad);
  un("relu", relu_grad);
  un("leaky_relu", leaky_relu_grad);
  un("elu", elu_grad);
  un("softplus", softplus_grad);
  un("round", zero_grad);
  un("ceil", zero_grad);
  un("floor", zero_grad);
  un("logical_not", nullptr);
}
}  // namespace detail

// ---- public functions ----
Tensor add(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "add");
  return binary(def_of<add_name>(), a, b);
}
Tensor subtract(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "subtract");
  return binary(def_of<subtract_name>(), a, b);
}
Tensor multiply(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "multiply");
  return binary(def_of<multiply_name>(), a, b);
}
// True division: integer operands divide as f32 (as NumPy's / gives a float).
Tensor divide(const Tensor& a, const Tensor& b) {
  DType t = promote_types(a.dtype(), b.dtype());
  if (!is_floating(t)) {
    check_not_bool(a, "divide");
    return binary(def_of<divide_name>(), cast(a, DType::f32), cast(b, DType::f32));
  }
  return binary(def_of<divide_name>(), a, b);
}
Tensor floor_div(const Tensor& a, const Tensor& b) { return binary(def_of<floor_div_name>(), a, b); }
Tensor mod(const Tensor& a, const Tensor& b) { return binary(def_of<mod_name>(), a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(def_of<pow_name>(), a, b); }
// A number next to an integer tensor that is not whole would be truncated by like_scalar
// (pow(i, 0.5) would be i^0): the tensor is taken as f32 then, as divide() does.
namespace {
bool fractional_with_integer(double v, const Tensor& t) {
  return t.defined() && !is_floating(t.dtype()) && t.dtype() != DType::boolean &&
         v != std::floor(v);
}
}  // namespace
Tensor pow(const Tensor& a, double b) {
  if (!a.defined()) fail("pow", "an input is an undefined Tensor");
  if (fractional_with_integer(b, a)) return pow(cast(a, DType::f32), scalar(b, DType::f32));
  return pow(a, like_scalar(b, a));
}
Tensor pow(double a, const Tensor& b) {
  if (!b.defined()) fail("pow", "an input is an undefined Tensor");
  if (fractional_with_integer(a, b)) return pow(scalar(a, DType::f32), cast(b, DType::f32));
  return pow(like_scalar(a, b), b);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(def_of<maximum_name>(), a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(def_of<minimum_name>(), a, b); }
Tensor squared_difference(const Tensor& a, const Tensor& b) {
  return binary(def_of<squared_difference_name>(), a, b);
}
Tensor equal(const Tensor& a, const Tensor& b) { return binary(def_of<equal_name>(), a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return binary(def_of<not_equal_name>(), a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return binary(def_of<less_name>(), a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return binary(def_of<less_equal_name>(), a, b); }
Tensor greater(const Tensor& a, const Tensor& b) { return binary(def_of<greater_name>(), a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) { return binary(def_of<greater_equal_name>(), a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_and");
  check_bool(b, "logical_and");
  return binary(def_of<logical_and_name>(), a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_or");
  check_bool(b, "logical_or");
  return binary(def_of<logical_or_name>(), a, b);
}
Tensor logical_not(const Tensor& a) {
  check_bool(a, "logical_not");
  static const OpDef& d = get_op("logical_not");
  return unary(d, a);
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  static const OpDef& d = get_op("where");
  DType t = promote_types(a.dtype(), b.dtype());
  return call_op1(d, {cond, cast(a, t), cast(b, t)});
}
Tensor clip(const Tensor& t, double lo, double hi) {
  if (lo > hi) fail("clip", "lower bound ", lo, " exceeds upper bound ", hi);
  return minimum(maximum(t, like_scalar(lo, t)), like_scalar(hi, t));
}

#define SOMA_UNARY_FN(NAME, CHECK)                  \
  Tensor NAME(const Tensor& t) {                    \
    CHECK(t, #NAME);                                \
    static const OpDef& d = get_op(#NAME);          \
    return unary(d, t);                             \
  }
SOMA_UNARY_FN(abs, check_not_bool)
SOMA_UNARY_FN(negative, check_not_bool)
SOMA_UNARY_FN(sign, check_not_bool)
SOMA_UNARY_FN(square, check_not_bool)
SOMA_UNARY_FN(relu, check_not_bool)
SOMA_UNARY_FN(reciprocal, check_floating)
SOMA_UNARY_FN(sqrt, check_floating)
SOMA_UNARY_FN(rsqrt, check_floating)
SOMA_UNARY_FN(exp, check_floating)
SOMA_UNARY_FN(log, check_floating)
SOMA_UNARY_FN(log1p, check_floating)
SOMA_UNARY_FN(expm1, check_floating)
SOMA_UNARY_FN(sin, check_floating)
SOMA_UNARY_FN(cos, check_floating)
SOMA_UNARY_FN(tanh, check_floating)
SOMA_UNARY_FN(erf, check_floating)
SOMA_UNARY_FN(sigmoid, check_floating)
SOMA_UNARY_FN(softplus, check_floating)
SOMA_UNARY_FN(round, check_floating)
SOMA_UNARY_FN(ceil, check_floating)
SOMA_UNARY_FN(floor, check_floating)
#undef SOMA_UNARY_FN

Tensor leaky_relu(const Tensor& t, double alpha) {
  check_floating(t, "leaky_relu");
  static const OpDef& d = get_op("leaky_relu");
  return unary(d, t, {{"alpha", alpha}});
}
Tensor elu(const Tensor& t, double alpha) {
  check_floating(t, "elu");
  static const OpDef& d = get_op("elu");
  return unary(d, t, {{"alpha", alpha}});
}
// A composite: its gradient comes from erf's (or tanh's) for free.
Tensor gelu(const Tensor& t, bool approximate) {
  check_floating(t, "gelu");
  if (approximate) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return t * 0.5 * (1.0 + tanh((t + t * t * t * 0.044715) * k));
  }
  return t * 0.5 * (1.0 + erf(t * (1.0 / std::numbers::sqrt2)));
}

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return subtract(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return multiply(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return divide(a, b); }
Tensor operator-(const Tensor& a) { return negative(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, like_scalar(b, a)); }
Tensor operator-(const Tensor& a, double b) { return subtract(a, like_scalar(b, a)); }
Tensor operator*(const Tensor& a, double b) { return multiply(a, like_scalar(b, a)); }
Tensor operator/(const Tensor& a, double b) { return divide(a, like_scalar(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(like_scalar(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return subtract(like_scalar(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return multiply(like_scalar(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return divide(like_scalar(a, b), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return equal(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return not_equal(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return less(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return less_equal(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return greater(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return greater_equal(a, b); }
// Comparing with a C++ number: an integer tensor against 0.5 must not truncate 0.5 to 0, so
// the scalar takes the wider of the tensor's dtype and f64 when it is not a whole number.
static Tensor cmp_scalar(double v, const Tensor& t) {
  if (!is_floating(t.dtype()) && v != std::floor(v)) return scalar(v, DType::f64);
  return like_scalar(v, t);
}
Tensor operator==(const Tensor& a, double b) { return equal(a, cmp_scalar(b, a)); }
Tensor operator!=(const Tensor& a, double b) { return not_equal(a, cmp_scalar(b, a)); }
Tensor operator<(const Tensor& a, double b) { return less(a, cmp_scalar(b, a)); }
Tensor operator<=(const Tensor& a, double b) { return less_equal(a, cmp_scalar(b, a)); }
Tensor operator>(const Tensor& a, double b) { return greater(a, cmp_scalar(b, a)); }
Tensor operator>=(const Tensor& a, double b) { return greater_equal(a, cmp_scalar(b, a)); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator!(const Tensor& a) { return logical_not(a); }

}  // namespace soma
