// Elementwise op definitions: shape/dtype rules, gradients (written with ops) and the public
// functions. Binary ops broadcast (NumPy rules); the public functions promote mixed dtypes.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "internal/registration.hpp"
#include "ops/elementwise_table.hpp"
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

// Each op's infer function needs its own name for messages; a template per functor does it.
template <class F>
std::vector<TensorSpec> binary_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return binary_infer_impl(in, F::name, F::family == ew::Family::Predicate);
}
std::vector<TensorSpec> unary_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return {in[0]};
}
template <class F>
constexpr InferFn unary_infer_of = unary_infer;
std::vector<TensorSpec> where_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  if (in[0].dtype != DType::boolean)
    fail("where", "condition must have dtype bool, got ", dtype_name(in[0].dtype));
  if (in[1].dtype != in[2].dtype)
    fail("where", "branches have different dtypes: ", dtype_name(in[1].dtype), " and ",
         dtype_name(in[2].dtype));
  Shape s = broadcast_shapes(in[0].shape, in[1].shape, "where");
  return {{broadcast_shapes(s, in[2].shape, "where"), in[1].dtype}};
}

// `x * 2.0`'s scalar, made on x's device: filled there instead of copied from the host per op
// (a device step would otherwise make a host-to-device copy for every constant).
Tensor like_scalar(double v, const Tensor& t) {
  if (t.device().is_cpu()) [[likely]] return scalar(v, t.dtype());
  return full_like(Tensor::empty({}, t.dtype(), t.device()), v);
}

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
// d/dx asin = 1 / sqrt(1 - x^2), acos its negative, atan 1 / (1 + x^2).
std::vector<Tensor> asin_grad(G c) { return {c.grads[0] * rsqrt(1.0 - square(c.inputs[0]))}; }
std::vector<Tensor> acos_grad(G c) {
  return {negative(c.grads[0]) * rsqrt(1.0 - square(c.inputs[0]))};
}
std::vector<Tensor> atan_grad(G c) { return {c.grads[0] / (square(c.inputs[0]) + 1.0)}; }
std::vector<Tensor> tanh_grad(G c) { return {c.grads[0] * (1.0 - square(c.outputs[0]))}; }
std::vector<Tensor> erf_grad(G c) {
  return {c.grads[0] * (2.0 / std::sqrt(std::numbers::pi)) * exp(negative(square(c.inputs[0])))};
}
// gelu_erf(x) = x Phi(x): the gradient g * (Phi(x) + x phi(x)) as one op (gelu_erf_grad).
std::vector<Tensor> gelu_erf_grad(G c) {
  static const OpDef& d = get_op("gelu_erf_grad");
  return {call_op1(d, {c.inputs[0], c.grads[0]})};
}
// gelu_erf_grad(x, g) = g * (Phi(x) + x phi(x)): d/dx = g phi(x) (2 - x^2), d/dg the same op.
std::vector<Tensor> gelu_erf_grad_grad(G c) {
  const Tensor &x = c.inputs[0], &g = c.inputs[1], &u = c.grads[0];
  static const OpDef& d = get_op("gelu_erf_grad");
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
  Tensor x2 = square(x);
  return {c.needs(0) ? u * g * (exp(x2 * -0.5) * inv_sqrt_2pi) * (2.0 - x2) : Tensor(),
          c.needs(1) ? call_op1(d, {x, u}) : Tensor()};
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
// x * relu6(x + 3) / 6: (2x + 3) / 6 on (-3, 3), 1 above, 0 below.
std::vector<Tensor> hardswish_grad(G c) {
  const Tensor& x = c.inputs[0];
  Tensor inner = (x * 2.0 + 3.0) * (1.0 / 6.0);
  Tensor d = where(x <= -3.0, zeros_like(x), where(x >= 3.0, ones_like(x), inner));
  return {c.grads[0] * d};
}
// x / (1 + |x|): 1 / (1 + |x|)^2.
std::vector<Tensor> softsign_grad(G c) {
  return {c.grads[0] / square(abs(c.inputs[0]) + 1.0)};
}
// clamp(alpha x + beta, 0, 1): alpha inside (0, 1), 0 outside.
std::vector<Tensor> hard_sigmoid_grad(G c) {
  const double alpha = c.attrs.f("alpha");
  Tensor z = c.inputs[0] * alpha + c.attrs.f("beta");
  Tensor inside = logical_and(z > 0.0, z < 1.0);
  return {where(inside, c.grads[0] * alpha, zeros_like(c.grads[0]))};
}

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
// The definition of a table op, looked up once per op rather than per call.
template <class F>
const OpDef& def_of() {
  static const OpDef& d = get_op(F::name);
  return d;
}
// The dtype check of the public function of a unary table op, by its family.
template <ew::Family F>
void check_family(const Tensor& t, const char* op) {
  if constexpr (F == ew::Family::Numeric) check_not_bool(t, op);
  else if constexpr (F == ew::Family::Float) check_floating(t, op);
  else if constexpr (F == ew::Family::Bool) check_bool(t, op);
}

// ---- the table's op definitions ----
// The test table's reference: the op's f64 formula (the table's `reference` column) applied to
// f64 inputs, broadcast as NumPy does; bool for predicates.
template <class Ref, class F>
std::vector<Tensor> ew_reference(const std::vector<Tensor>& in, const Attrs& attrs) {
  const F params = ew::make_functor<F>(attrs);
  Shape shape = in[0].shape();
  for (const Tensor& t : in) shape = broadcast_shapes(shape, t.shape(), F::name);
  std::vector<Tensor> xs;
  for (const Tensor& t : in) xs.push_back(contiguous(broadcast_to(cast(t, DType::f64), shape)));
  const bool pred = F::family == ew::Family::Predicate;
  Tensor out = Tensor::empty(shape, pred ? DType::boolean : DType::f64);
  const std::int64_t n = out.numel();
  const double* a = xs[0].data<double>();
  const double* b = xs.size() > 1 ? xs[1].data<double>() : a;
  for (std::int64_t i = 0; i < n; ++i) {
    const double r = Ref::f(a[i], b[i], params.alpha, params.beta);
    if (pred) out.data<bool>()[i] = r != 0;
    else out.data<double>()[i] = r;
  }
  return {out};
}

std::vector<Shape> test_shapes(ew::TestShapes s) {
  switch (s) {
    case ew::TestShapes::None: break;
    case ew::TestShapes::One: return {{3, 4}};
    case ew::TestShapes::Broadcast: return {{3, 4}, {4}};
    case ew::TestShapes::Same: return {{3, 4}, {3, 4}};
  }
  return {};
}

std::uint32_t family_tags(ew::Family f, int arity) {
  std::uint32_t t = arity == 1 ? kElementwiseUnary : kElementwiseBinary;
  if (f == ew::Family::Float) t |= kFloatOnly;
  if (f == ew::Family::Predicate || f == ew::Family::Bool) t |= kPredicate;  // bool output
  return t;
}

// One table entry's definition. attrs: the table's (count, alpha, beta).
template <class F>
OpDef table_op(InferFn infer, GradFn grad, std::uint32_t tags, const char* onnx_type, int opset,
               ew::TestShapes shapes, double lo, double hi, bool gradcheck, double min_gap,
               std::vector<double> kinks, ReferenceFn reference) {
  OpDef d;
  d.name = F::name;
  d.num_inputs = F::arity;
  d.infer = infer;
  d.grad = grad;
  d.tags = family_tags(F::family, F::arity) | tags;
  const F defaults{};
  if constexpr (F::num_attrs > 0) {
    d.attrs.push_back({"alpha", defaults.alpha});
    d.onnx.attrs.push_back({"alpha", "alpha"});
    d.test.attrs.set("alpha", defaults.alpha);
  }
  if constexpr (F::num_attrs > 1) {
    d.attrs.push_back({"beta", defaults.beta});
    d.onnx.attrs.push_back({"beta", "beta"});
    d.test.attrs.set("beta", defaults.beta);
  }
  d.onnx.op_type = onnx_type;
  d.onnx.min_opset = opset;
  d.test.shapes = test_shapes(shapes);
  d.test.lo = lo;
  d.test.hi = hi;
  d.test.gradcheck = gradcheck && grad != nullptr;
  d.test.min_gap = min_gap;
  d.test.kinks = std::move(kinks);
  d.test.reference = reference;
  return d;
}

// Per entry: its reference as a function of (x or a, b, alpha, beta).
#define SOMA_EW_REF(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR)           \
  struct NAME##_ref {                                                                      \
    static double f([[maybe_unused]] double x, [[maybe_unused]] double unused,            \
                    [[maybe_unused]] double alpha, [[maybe_unused]] double beta) {        \
      return double(REF);                                                                  \
    }                                                                                      \
  };
#define SOMA_EW_REF2(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR)          \
  struct NAME##_ref {                                                                      \
    static double f(double a, double b, [[maybe_unused]] double alpha,                    \
                    [[maybe_unused]] double beta) {                                        \
      return double(REF);                                                                  \
    }                                                                                      \
  };
SOMA_ELEMENTWISE_UNARY(SOMA_EW_REF)
SOMA_ELEMENTWISE_BINARY(SOMA_EW_REF2)
#undef SOMA_EW_REF
#undef SOMA_EW_REF2

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
#define SOMA_EW_ONNX(TYPE, OPSET) TYPE, OPSET
#define SOMA_EW_TEST(SHAPES, LO, HI, GRADCHECK, GAP, ...) \
  ew::TestShapes::SHAPES, LO, HI, GRADCHECK, GAP, std::vector<double> __VA_ARGS__
#define SOMA_EW_REGISTER(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR)       \
  register_op(table_op<ew::NAME##_fn>(INFER<ew::NAME##_fn>, GRAD, TAGS, SOMA_EW_ONNX ONNX, \
                                      SOMA_EW_TEST TEST,                                   \
                                      ew_reference<NAME##_ref, ew::NAME##_fn>));
#define INFER unary_infer_of
  SOMA_ELEMENTWISE_UNARY(SOMA_EW_REGISTER)
#undef INFER
#define INFER binary_infer
  SOMA_ELEMENTWISE_BINARY(SOMA_EW_REGISTER)
#undef INFER
#undef SOMA_EW_REGISTER
#undef SOMA_EW_TEST
#undef SOMA_EW_ONNX
  register_op({.name = "where", .num_inputs = 3, .infer = where_infer, .grad = where_grad});
}
}  // namespace detail

// ---- public functions ----
Tensor add(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "add");
  return binary(def_of<ew::add_fn>(), a, b);
}
Tensor subtract(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "subtract");
  return binary(def_of<ew::subtract_fn>(), a, b);
}
Tensor multiply(const Tensor& a, const Tensor& b) {
  check_not_bool(a, "multiply");
  return binary(def_of<ew::multiply_fn>(), a, b);
}
// True division: integer operands divide as f32 (as NumPy's / gives a float).
Tensor divide(const Tensor& a, const Tensor& b) {
  DType t = promote_types(a.dtype(), b.dtype());
  if (!is_floating(t)) {
    check_not_bool(a, "divide");
    return binary(def_of<ew::divide_fn>(), cast(a, DType::f32), cast(b, DType::f32));
  }
  return binary(def_of<ew::divide_fn>(), a, b);
}
Tensor floor_div(const Tensor& a, const Tensor& b) { return binary(def_of<ew::floor_div_fn>(), a, b); }
Tensor mod(const Tensor& a, const Tensor& b) { return binary(def_of<ew::mod_fn>(), a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(def_of<ew::pow_fn>(), a, b); }
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
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(def_of<ew::maximum_fn>(), a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(def_of<ew::minimum_fn>(), a, b); }
Tensor squared_difference(const Tensor& a, const Tensor& b) {
  return binary(def_of<ew::squared_difference_fn>(), a, b);
}
Tensor equal(const Tensor& a, const Tensor& b) { return binary(def_of<ew::equal_fn>(), a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return binary(def_of<ew::not_equal_fn>(), a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return binary(def_of<ew::less_fn>(), a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return binary(def_of<ew::less_equal_fn>(), a, b); }
Tensor greater(const Tensor& a, const Tensor& b) { return binary(def_of<ew::greater_fn>(), a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) { return binary(def_of<ew::greater_equal_fn>(), a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_and");
  check_bool(b, "logical_and");
  return binary(def_of<ew::logical_and_fn>(), a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_or");
  check_bool(b, "logical_or");
  return binary(def_of<ew::logical_or_fn>(), a, b);
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

// The unary table ops without attributes: check the dtype by the family, call the op.
#define SOMA_EW_CAT_(A, B) A##B
#define SOMA_EW_CAT(A, B) SOMA_EW_CAT_(A, B)
#define SOMA_EW_NUM_ATTRS(N, A, B) N
#define SOMA_EW_PUBLIC_0(NAME, FAM)                  \
  Tensor NAME(const Tensor& t) {                     \
    check_family<ew::Family::FAM>(t, #NAME);         \
    return unary(def_of<ew::NAME##_fn>(), t);        \
  }
#define SOMA_EW_PUBLIC_1(NAME, FAM)
#define SOMA_EW_PUBLIC_2(NAME, FAM)
#define SOMA_EW_PUBLIC(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR) \
  SOMA_EW_CAT(SOMA_EW_PUBLIC_, SOMA_EW_NUM_ATTRS ATTRS)(NAME, FAM)
SOMA_ELEMENTWISE_UNARY(SOMA_EW_PUBLIC)
#undef SOMA_EW_PUBLIC
#undef SOMA_EW_PUBLIC_0
#undef SOMA_EW_PUBLIC_1
#undef SOMA_EW_PUBLIC_2
#undef SOMA_EW_NUM_ATTRS
#undef SOMA_EW_CAT
#undef SOMA_EW_CAT_

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
Tensor hard_sigmoid(const Tensor& t, double alpha, double beta) {
  check_floating(t, "hard_sigmoid");
  static const OpDef& d = get_op("hard_sigmoid");
  return unary(d, t, {{"alpha", alpha}, {"beta", beta}});
}
// The tanh form is a composite (its gradient comes from tanh's); the erf form is the gelu_erf op
// (issue 26: as five ops it held five activations per call and made ten passes in training).
Tensor gelu(const Tensor& t, bool approximate) {
  check_floating(t, "gelu");
  if (approximate) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return t * 0.5 * (1.0 + tanh((t + t * t * t * 0.044715) * k));
  }
  return gelu_erf(t);
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
