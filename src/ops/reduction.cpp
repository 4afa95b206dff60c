// Reduction op definitions and the public functions.
//
// Primitive ops (each with a CPU kernel): sum, mean, prod, max, min, all, any (attrs "axes":
// normalised, sorted, explicit; "keepdims"), argmax/argmin ("axis", "keepdims"; i64 output) and
// the fused, stable softmax/log_softmax ("axis"). logsumexp, variance, stddev and norm are
// composites of ops, so their gradients come for free.
//
// Dtypes: sum/prod/max/min keep the input's numeric dtype (integer sums wrap like the dtype);
// sum of bool counts the true elements as i64 (NumPy's choice). mean, logsumexp, variance,
// stddev, norm, softmax and log_softmax take floating dtypes only; all/any take bool only.
// f16/bf16 accumulate in f32 or wider; f32 sums are pairwise and accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "internal/registration.hpp"
#include "references.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

using G = const GradContext&;

// Normalises an axis list for `op` on `shape`: empty means every axis; negatives count from the
// end; the result is sorted. Messages name the op, the axis and the shape.
std::vector<std::int64_t> reduce_axes(const Axes& axes, const Shape& shape, const char* op) {
  const std::int64_t r = std::int64_t(shape.size());
  std::vector<std::int64_t> out;
  if (axes.empty()) {
    for (std::int64_t i = 0; i < r; ++i) out.push_back(i);
    return out;
  }
  for (auto a : axes) {
    if (a < -r || a >= r)
      fail(op, "axis ", a, " is out of range for shape ", shape_str(shape),
           r == 0 ? std::string(" (a scalar has no axes)")
                  : " (expected " + std::to_string(-r) + " <= axis < " + std::to_string(r) + ")");
    out.push_back(a < 0 ? a + r : a);
  }
  std::sort(out.begin(), out.end());
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i] == out[i - 1])
      fail(op, "axis ", out[i], " appears more than once in the axis list for shape ",
           shape_str(shape));
  return out;
}

std::int64_t one_axis(std::int64_t axis, const Shape& shape, const char* op) {
  return reduce_axes({axis}, shape, op)[0];
}

Shape reduced_shape(const Shape& in, const std::vector<std::int64_t>& axes, bool keepdims) {
  Shape out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    bool red = std::find(axes.begin(), axes.end(), std::int64_t(i)) != axes.end();
    if (!red) out.push_back(in[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

// Elements reduced into each output element.
std::int64_t reduced_count(const Shape& in, const std::vector<std::int64_t>& axes) {
  std::int64_t n = 1;
  for (auto a : axes) n *= in[std::size_t(a)];
  return n;
}

// Checks what infer cannot assume when a graph supplies the attrs.
void check_axes_attr(const Shape& in, const std::vector<std::int64_t>& axes, const char* op) {
  for (auto a : axes)
    if (a < 0 || a >= std::int64_t(in.size()))
      fail(op, "axis ", a, " is out of range for shape ", shape_str(in));
}

enum class Kind { Numeric, Floating, Bool };

void check_dtype(DType t, Kind k, const char* op) {
  switch (k) {
    case Kind::Numeric:
      if (t == DType::boolean)
        fail(op, "dtype bool is not supported (cast to a numeric dtype first)");
      return;
    case Kind::Floating:
      if (!is_floating(t))
        fail(op, "dtype ", dtype_name(t),
             " is not supported (expected f32, f64, f16 or bf16; cast first)");
      return;
    case Kind::Bool:
      if (t != DType::boolean)
        fail(op, "expected a bool tensor, got dtype ", dtype_name(t),
             " (compare first, or cast(t, DType::boolean))");
      return;
  }
}

// An empty reduction has no identity for max/min/argmax/argmin.
void check_nonempty(const Shape& in, const std::vector<std::int64_t>& axes, const char* op) {
  if (reduced_count(in, axes) == 0 && numel(reduced_shape(in, axes, false)) > 0)
    fail(op, "cannot reduce over an empty axis of shape ", shape_str(in),
         " (the reduction has no identity)");
}

template <const char* Name, Kind K, bool NeedsElements>
std::vector<TensorSpec> reduce_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const auto& axes = a.ints("axes");
  check_axes_attr(in[0].shape, axes, Name);
  check_dtype(in[0].dtype, K, Name);
  if (NeedsElements) check_nonempty(in[0].shape, axes, Name);
  return {{reduced_shape(in[0].shape, axes, a.b("keepdims")), in[0].dtype}};
}

template <const char* Name>
std::vector<TensorSpec> arg_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  std::vector<std::int64_t> axes{a.i("axis")};
  check_axes_attr(in[0].shape, axes, Name);
  check_nonempty(in[0].shape, axes, Name);
  return {{reduced_shape(in[0].shape, axes, a.b("keepdims")), DType::i64}};
}

template <const char* Name>
std::vector<TensorSpec> softmax_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_axes_attr(in[0].shape, {a.i("axis")}, Name);
  check_dtype(in[0].dtype, Kind::Floating, Name);
  return {in[0]};
}

constexpr char sum_name[] = "sum";
constexpr char mean_name[] = "mean";
constexpr char prod_name[] = "prod";
constexpr char max_name[] = "max";
constexpr char min_name[] = "min";
constexpr char all_name[] = "all";
constexpr char any_name[] = "any";
constexpr char argmax_name[] = "argmax";
constexpr char argmin_name[] = "argmin";
constexpr char softmax_name[] = "softmax";
constexpr char log_softmax_name[] = "log_softmax";

// ---- gradients ----
// A reduced tensor (keepdims or not) brought back to the input's shape.
Tensor expand_back(const Tensor& r, const Shape& in, const Attrs& a) {
  Shape kd = reduced_shape(in, a.ints("axes"), true);
  return broadcast_to(reshape(r, kd), in);
}

std::vector<Tensor> sum_grad(G c) { return {expand_back(c.grads[0], c.inputs[0].shape(), c.attrs)}; }

std::vector<Tensor> mean_grad(G c) {
  const Shape& in = c.inputs[0].shape();
  std::int64_t n = reduced_count(in, c.attrs.ints("axes"));
  return {expand_back(c.grads[0] * (1.0 / double(n)), in, c.attrs)};
}

// max/min: ties split the gradient evenly between the tied elements (as TensorFlow does).
std::vector<Tensor> extreme_grad(G c) {
  const Tensor& x = c.inputs[0];
  const auto& axes = c.attrs.ints("axes");
  Tensor mask = cast(equal(x, expand_back(c.outputs[0], x.shape(), c.attrs)), x.dtype());
  Tensor count = sum(mask, axes, /*keepdims=*/true);
  return {expand_back(c.grads[0], x.shape(), c.attrs) * mask / count};
}

// prod: d/dx_i = product of the other elements, computed without dividing by zero: with no zero
// in the slice it is prod/x_i; with exactly one zero only that element gets the product of the
// others; with two or more zeros every derivative is 0.
std::vector<Tensor> prod_grad(G c) {
  const Tensor& x = c.inputs[0];
  const auto& axes = c.attrs.ints("axes");
  Tensor zero = scalar(0.0, x.dtype()), one = scalar(1.0, x.dtype());
  Tensor is_zero = equal(x, zero);
  Tensor safe = where(is_zero, one, x);
  Tensor p_nonzero = broadcast_to(prod(safe, axes, true), x.shape());
  Tensor zeros_in = broadcast_to(sum(cast(is_zero, x.dtype()), axes, true), x.shape());
  Tensor d = where(equal(zeros_in, zero), p_nonzero / safe,
                   where(logical_and(equal(zeros_in, one), is_zero), p_nonzero, zeros_like(x)));
  return {expand_back(c.grads[0], x.shape(), c.attrs) * d};
}

std::vector<Tensor> softmax_grad(G c) {
  const Tensor &g = c.grads[0], &y = c.outputs[0];
  return {y * (g - sum(g * y, {c.attrs.i("axis")}, true))};
}

std::vector<Tensor> log_softmax_grad(G c) {
  const Tensor &g = c.grads[0], &y = c.outputs[0];
  return {g - exp(y) * sum(g, {c.attrs.i("axis")}, true)};
}

Tensor reduce_call(const char* name, const Tensor& t, const Axes& axes, bool keepdims) {
  if (!t.defined()) fail(name, "the input is an undefined Tensor");
  const OpDef& d = get_op(name);
  return call_op1(d, {t}, {{"axes", reduce_axes(axes, t.shape(), name)}, {"keepdims", keepdims}});
}

// 16-bit floats go through f32 where an intermediate (a square, an exp sum) could overflow.
bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace

namespace detail {
void register_reduction_ops() {
  using Ints = std::vector<std::int64_t>;
  const DType boolean = DType::boolean;
  register_op({.name = "sum", .num_inputs = 1, .infer = reduce_infer<sum_name, Kind::Numeric, false>,
               .grad = sum_grad, .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axes", Ints{0, 2}}, {"keepdims", false}},
                        .reference = ref::sum}});
  register_op({.name = "mean", .num_inputs = 1,
               .infer = reduce_infer<mean_name, Kind::Floating, false>, .grad = mean_grad,
               .tags = kReduction | kAutocastF32 | kFloatOnly,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axes", Ints{0, 2}}, {"keepdims", true}},
                        .reference = ref::mean}});
  register_op({.name = "prod", .num_inputs = 1,
               .infer = reduce_infer<prod_name, Kind::Numeric, false>, .grad = prod_grad,
               .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axes", Ints{1}}, {"keepdims", false}},
                        .reference = ref::prod}});
  register_op({.name = "max", .num_inputs = 1, .infer = reduce_infer<max_name, Kind::Numeric, true>,
               .grad = extreme_grad, .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axes", Ints{2}}, {"keepdims", false}},
                        .reference = ref::max}});
  register_op({.name = "min", .num_inputs = 1, .infer = reduce_infer<min_name, Kind::Numeric, true>,
               .grad = extreme_grad, .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axes", Ints{0, 1}}, {"keepdims", true}},
                        .reference = ref::min}});
  register_op({.name = "all", .num_inputs = 1, .infer = reduce_infer<all_name, Kind::Bool, false>,
               .grad = nullptr, .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{3, 4}}, .attrs = {{"axes", Ints{1}}, {"keepdims", false}},
                        .reference = ref::all, .gradcheck = false,
                        .fixed_inputs = {{0, boolean, -1, 6}}}});  // mostly true: some rows all true
  register_op({.name = "any", .num_inputs = 1, .infer = reduce_infer<any_name, Kind::Bool, false>,
               .grad = nullptr, .tags = kReduction | kAutocastF32,
               .test = {.shapes = {{3, 4}}, .attrs = {{"axes", Ints{0}}, {"keepdims", true}},
                        .reference = ref::any, .gradcheck = false,
                        .fixed_inputs = {{0, boolean, -3, 1}}}});  // mostly false
  register_op({.name = "argmax", .num_inputs = 1, .infer = arg_infer<argmax_name>, .grad = nullptr,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axis", std::int64_t(1)}, {"keepdims", false}},
                        .reference = ref::argmax, .gradcheck = false}});
  register_op({.name = "argmin", .num_inputs = 1, .infer = arg_infer<argmin_name>, .grad = nullptr,
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axis", std::int64_t(2)}, {"keepdims", true}},
                        .reference = ref::argmin, .gradcheck = false}});
  register_op({.name = "softmax", .num_inputs = 1, .infer = softmax_infer<softmax_name>,
               .grad = softmax_grad, .tags = kFloatOnly | kAutocastF32,
               .onnx = {.op_type = "Softmax", .min_opset = 13, .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axis", std::int64_t(1)}},
                        .reference = ref::softmax}});
  register_op({.name = "log_softmax", .num_inputs = 1, .infer = softmax_infer<log_softmax_name>,
               .grad = log_softmax_grad, .tags = kFloatOnly | kAutocastF32,
               .onnx = {.op_type = "LogSoftmax", .min_opset = 13, .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"axis", std::int64_t(2)}},
                        .reference = ref::log_softmax}});
}
}  // namespace detail

// ---- public functions ----
Tensor sum(const Tensor& t, const Axes& axes, bool keepdims) {
  if (t.defined() && t.dtype() == DType::boolean)
    return reduce_call("sum", cast(t, DType::i64), axes, keepdims);
  return reduce_call("sum", t, axes, keepdims);
}

Tensor mean(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("mean", t, axes, keepdims);
}
Tensor max(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("max", t, axes, keepdims);
}
Tensor min(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("min", t, axes, keepdims);
}
Tensor prod(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("prod", t, axes, keepdims);
}
Tensor all(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("all", t, axes, keepdims);
}
Tensor any(const Tensor& t, const Axes& axes, bool keepdims) {
  return reduce_call("any", t, axes, keepdims);
}

// Stable: shifts by the (gradient-free) max so exp never overflows; an empty reduction gives
// -inf, a slice of -inf gives -inf.
Tensor logsumexp(const Tensor& t, const Axes& axes, bool keepdims) {
  if (!t.defined()) fail("logsumexp", "the input is an undefined Tensor");
  check_dtype(t.dtype(), Kind::Floating, "logsumexp");
  auto ax = reduce_axes(axes, t.shape(), "logsumexp");
  if (is_half(t.dtype())) return cast(logsumexp(cast(t, DType::f32), ax, keepdims), t.dtype());
  if (reduced_count(t.shape(), ax) == 0) return log(sum(exp(t), ax, keepdims));
  Tensor m = stop_gradient(max(t, ax, true));
  m = where(less(abs(m), scalar(std::numeric_limits<double>::infinity(), t.dtype())), m,
            zeros_like(m));
  Tensor r = log(sum(exp(t - m), ax, true)) + m;
  return keepdims ? r : reshape(r, reduced_shape(t.shape(), ax, false));
}

// Population variance (ddof 0), two-pass: mean first, then the mean squared deviation.
Tensor variance(const Tensor& t, const Axes& axes, bool keepdims) {
  if (!t.defined()) fail("variance", "the input is an undefined Tensor");
  check_dtype(t.dtype(), Kind::Floating, "variance");
  auto ax = reduce_axes(axes, t.shape(), "variance");
  if (is_half(t.dtype())) return cast(variance(cast(t, DType::f32), ax, keepdims), t.dtype());
  Tensor d = t - mean(t, ax, true);
  return mean(square(d), ax, keepdims);
}

// The gradient is infinite where the variance is 0 (as in TensorFlow).
Tensor stddev(const Tensor& t, const Axes& axes, bool keepdims) {
  if (!t.defined()) fail("stddev", "the input is an undefined Tensor");
  check_dtype(t.dtype(), Kind::Floating, "stddev");
  return sqrt(variance(t, reduce_axes(axes, t.shape(), "stddev"), keepdims));
}

// ord 2: sqrt(sum(x^2)) (gradient undefined at 0); ord 1: sum |x|; ord inf: max |x|.
Tensor norm(const Tensor& t, const Axes& axes, bool keepdims, double ord) {
  if (!t.defined()) fail("norm", "the input is an undefined Tensor");
  check_dtype(t.dtype(), Kind::Floating, "norm");
  auto ax = reduce_axes(axes, t.shape(), "norm");
  if (ord == 2.0) {
    if (is_half(t.dtype())) return cast(norm(cast(t, DType::f32), ax, keepdims, ord), t.dtype());
    return sqrt(sum(square(t), ax, keepdims));
  }
  if (ord == 1.0) return sum(abs(t), ax, keepdims);
  if (std::isinf(ord) && ord > 0) {
    if (reduced_count(t.shape(), ax) == 0) return zeros(reduced_shape(t.shape(), ax, keepdims), t.dtype());
    return max(abs(t), ax, keepdims);
  }
  fail("norm", "ord must be 1, 2 or infinity, got ", ord, " (input shape ", shape_str(t.shape()), ")");
}

Tensor argmax(const Tensor& t, std::int64_t axis, bool keepdims) {
  if (!t.defined()) fail("argmax", "the input is an undefined Tensor");
  static const OpDef& d = get_op("argmax");
  return call_op1(d, {t}, {{"axis", one_axis(axis, t.shape(), "argmax")}, {"keepdims", keepdims}});
}
Tensor argmin(const Tensor& t, std::int64_t axis, bool keepdims) {
  if (!t.defined()) fail("argmin", "the input is an undefined Tensor");
  static const OpDef& d = get_op("argmin");
  return call_op1(d, {t}, {{"axis", one_axis(axis, t.shape(), "argmin")}, {"keepdims", keepdims}});
}

Tensor softmax(const Tensor& t, std::int64_t axis) {
  if (!t.defined()) fail("softmax", "the input is an undefined Tensor");
  static const OpDef& d = get_op("softmax");
  return call_op1(d, {t}, {{"axis", one_axis(axis, t.shape(), "softmax")}});
}
Tensor log_softmax(const Tensor& t, std::int64_t axis) {
  if (!t.defined()) fail("log_softmax", "the input is an undefined Tensor");
  static const OpDef& d = get_op("log_softmax");
  return call_op1(d, {t}, {{"axis", one_axis(axis, t.shape(), "log_softmax")}});
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (!t.defined()) fail("sum_to", "the input is an undefined Tensor");
  const Shape& s = t.shape();
  if (s == shape) return t;
  // Leading 1s in the target beyond t's rank are allowed: they only reshape.
  std::size_t extra = shape.size() > s.size() ? shape.size() - s.size() : 0;
  for (std::size_t i = 0; i < extra; ++i)
    if (shape[i] != 1)
      fail("sum_to", "cannot sum ", shape_str(s), " down to ", shape_str(shape),
           " (the target has more dimensions)");
  const std::size_t r = s.size(), tr = shape.size() - extra;
  Axes axes;
  const std::size_t lead = r - tr;
  for (std::size_t i = 0; i < lead; ++i) axes.push_back(std::int64_t(i));
  for (std::size_t i = 0; i < tr; ++i) {
    std::int64_t want = shape[extra + i], have = s[lead + i];
    if (want == have) continue;
    if (want != 1)
      fail("sum_to", "cannot sum ", shape_str(s), " down to ", shape_str(shape), ": dimension ",
           std::int64_t(i) - std::int64_t(tr), " is ", have, " vs ", want,
           " (expected equal or 1 in the target)");
    axes.push_back(std::int64_t(lead + i));
  }
  if (axes.empty()) return reshape(t, shape);
  return reshape(sum(t, axes, /*keepdims=*/true), shape);
}

}  // namespace soma
