// Linear-algebra op definitions: matmul (an op with its own gradient), the diagonal view, and
// the composites tensordot, diag and trace built on them. einsum lives in einsum.cpp.
#include <algorithm>

#include "internal/registration.hpp"
#include "references.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

// ---- matmul ----
// NumPy's rule: 1-d operands are promoted ([k] -> [1, k] on the left, [k, 1] on the right) and
// the added dims dropped from the result; the dims before the last two broadcast.
Shape matmul_shape(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    fail("matmul", "operands must have at least 1 dimension, got ", shape_str(a), " x ",
         shape_str(b), " (use multiply for scalars)");
  const std::int64_t ka = a.back();
  const std::int64_t kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (ka != kb) fail("matmul", "inner dimensions differ: ", shape_str(a), " x ", shape_str(b));
  Shape ab = a.size() > 2 ? Shape(a.begin(), a.end() - 2) : Shape{};
  Shape bb = b.size() > 2 ? Shape(b.begin(), b.end() - 2) : Shape{};
  Shape out;
  try {
    out = broadcast_shapes(ab, bb, "matmul");
  } catch (const Error&) {
    fail("matmul", "batch dimensions do not broadcast: ", shape_str(a), " x ", shape_str(b));
  }
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return out;
}

std::vector<TensorSpec> matmul_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  if (in[0].dtype != in[1].dtype)
    fail("matmul", "dtypes differ: ", dtype_name(in[0].dtype), " and ", dtype_name(in[1].dtype));
  if (in[0].dtype == DType::boolean)
    fail("matmul", "dtype bool is not supported (cast to a numeric dtype first)");
  return {{matmul_shape(in[0].shape, in[1].shape), in[0].dtype}};
}

Tensor swap_last_two(const Tensor& t) {
  std::vector<std::int64_t> perm(std::size_t(t.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}

Tensor reshape_if(const Tensor& t, const Shape& s) { return t.shape() == s ? t : reshape(t, s); }
Tensor sum_to_if(const Tensor& t, const Shape& s) { return t.shape() == s ? t : sum_to(t, s); }

// dA = g @ B^T, dB = A^T @ g, summed over the batch dims each operand was broadcast along.
std::vector<Tensor> matmul_grad(const GradContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  if (!is_floating(a.dtype())) return {Tensor(), Tensor()};
  Tensor a2 = a.rank() == 1 ? reshape(a, {1, a.dim(0)}) : a;
  Tensor b2 = b.rank() == 1 ? reshape(b, {b.dim(0), 1}) : b;
  Tensor g = reshape_if(c.grads[0], matmul_shape(a2.shape(), b2.shape()));
  // Each product is skipped when nobody asked for it: for a network's first layer, dx = g W^T
  // costs as much as dW and is thrown away.
  Tensor da, db;
  if (c.needs(0)) da = reshape_if(sum_to_if(matmul(g, swap_last_two(b2)), a2.shape()), a.shape());
  if (c.needs(1)) db = reshape_if(sum_to_if(matmul(swap_last_two(a2), g), b2.shape()), b.shape());
  return {da, db};
}

// ---- diagonal: a view over axes (axis1, axis2), which are removed; the diagonal becomes the
// last axis (NumPy's convention). Its stride is the sum of the two strides. ----
Shape diagonal_shape(const Shape& in, std::int64_t a1, std::int64_t a2) {
  Shape s;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (std::int64_t(i) != a1 && std::int64_t(i) != a2) s.push_back(in[i]);
  s.push_back(std::min(in[std::size_t(a1)], in[std::size_t(a2)]));
  return s;
}
std::vector<TensorSpec> diagonal_infer(const std::vector<TensorSpec>& in, const Attrs& at) {
  const std::int64_t r = std::int64_t(in[0].shape.size());
  const std::int64_t a1 = at.i("axis1"), a2 = at.i("axis2");
  if (a1 < 0 || a2 < 0 || a1 >= r || a2 >= r || a1 == a2)
    fail("diagonal", "axes ", a1, " and ", a2, " are not two distinct axes of shape ",
         shape_str(in[0].shape));
  return {{diagonal_shape(in[0].shape, a1, a2), in[0].dtype}};
}
void diagonal_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& at) {
  const Tensor& t = in[0];
  const std::int64_t a1 = at.i("axis1"), a2 = at.i("axis2");
  Strides st;
  for (std::int64_t i = 0; i < t.rank(); ++i)
    if (i != a1 && i != a2) st.push_back(t.strides()[std::size_t(i)]);
  st.push_back(t.strides()[std::size_t(a1)] + t.strides()[std::size_t(a2)]);
  out.push_back(Tensor::view_of(t, diagonal_shape(t.shape(), a1, a2), st, t.offset()));
}
// The gradient puts g back on the diagonal: g broadcast across the two axes times an identity
// mask, then the axes moved back. Made of ops, so it is differentiable again.
std::vector<Tensor> diagonal_grad(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t a1 = c.attrs.i("axis1"), a2 = c.attrs.i("axis2");
  const std::int64_t d1 = x.dim(a1), d2 = x.dim(a2);
  const Tensor& g = c.grads[0];
  Tensor spread = expand_dims(g, d1 <= d2 ? -1 : -2) * eye(d1, d2, g.dtype());
  // spread's axes are (the other axes in order, a1, a2); invert that order.
  std::vector<std::int64_t> src;
  for (std::int64_t i = 0; i < x.rank(); ++i)
    if (i != a1 && i != a2) src.push_back(i);
  src.push_back(a1);
  src.push_back(a2);
  std::vector<std::int64_t> perm(src.size());
  for (std::size_t j = 0; j < src.size(); ++j) perm[std::size_t(src[j])] = std::int64_t(j);
  return {transpose(spread, perm)};
}

void register_view(OpDef d) {
  for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = d.kernels[0];
  register_op(std::move(d));
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
  return v;
}

}  // namespace

namespace detail {
void register_linalg_ops() {
  register_op({.name = "matmul", .num_inputs = 2, .infer = matmul_infer, .grad = matmul_grad,
               .tags = kAutocastLow, .onnx = {.op_type = "MatMul"},
               .test = {.shapes = {{2, 3, 4}, {4, 5}}, .reference = ref::matmul}});
  register_view({.name = "diagonal", .num_inputs = 1, .infer = diagonal_infer,
                 .grad = diagonal_grad, .view = true, .kernels = {diagonal_kernel},
                 .tags = kShapeOnly,
                 .test = {.shapes = {{3, 4, 2}},
                          .attrs = {{"axis1", std::int64_t(0)}, {"axis2", std::int64_t(1)}},
                          .reference = ref::diagonal}});
  register_lapack_ops();
}

// The diagonal over two axes as a view (used by diag, trace and einsum).
Tensor diagonal_view(const Tensor& t, std::int64_t axis1, std::int64_t axis2) {
  static const OpDef& d = get_op("diagonal");
  return call_op1(d, {t}, {{"axis1", axis1}, {"axis2", axis2}});
}
}  // namespace detail

// ---- public functions ----
Tensor matmul(const Tensor& a, const Tensor& b) {
  static const OpDef& d = get_op("matmul");
  if (!a.defined() || !b.defined()) fail("matmul", "an input is an undefined Tensor");
  matmul_shape(a.shape(), b.shape());  // shape errors before any cast
  DType t = promote_types(a.dtype(), b.dtype());
  return call_op1(d, {cast(a, t), cast(b, t)});
}

Tensor tensordot(const Tensor& a, const Tensor& b, std::int64_t axes) {
  if (axes < 0 || axes > a.rank() || axes > b.rank())
    fail("tensordot", "cannot contract ", axes, " axes of ", shape_str(a.shape()), " and ",
         shape_str(b.shape()), " (expected 0 <= axes <= ", std::min(a.rank(), b.rank()), ")");
  std::vector<std::int64_t> aa, ba;
  for (std::int64_t i = 0; i < axes; ++i) {
    aa.push_back(a.rank() - axes + i);
    ba.push_back(i);
  }
  return tensordot(a, b, aa, ba);
}

// Free axes of a to the front and contracted ones to the back (the reverse for b), each side
// flattened to a matrix, then one matmul.
Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& axes_a,
                 const std::vector<std::int64_t>& axes_b) {
  const std::string shapes = shape_str(a.shape()) + " and " + shape_str(b.shape());
  if (axes_a.size() != axes_b.size())
    fail("tensordot", "axis lists differ in length: ", axes_a.size(), " axes of a vs ",
         axes_b.size(), " axes of b (shapes ", shapes, ")");
  std::vector<std::int64_t> ca, cb;
  std::vector<bool> used_a(std::size_t(a.rank()), false), used_b(std::size_t(b.rank()), false);
  std::int64_t k = 1;
  for (std::size_t i = 0; i < axes_a.size(); ++i) {
    const int x = normalize_axis(axes_a[i], a.rank(), "tensordot");
    const int y = normalize_axis(axes_b[i], b.rank(), "tensordot");
    if (used_a[std::size_t(x)] || used_b[std::size_t(y)])
      fail("tensordot", "an axis is contracted twice (shapes ", shapes, ")");
    used_a[std::size_t(x)] = used_b[std::size_t(y)] = true;
    if (a.dim(x) != b.dim(y))
      fail("tensordot", "contracted dimensions differ: axis ", x, " of ", shape_str(a.shape()),
           " has size ", a.dim(x), " but axis ", y, " of ", shape_str(b.shape()), " has size ",
           b.dim(y));
    ca.push_back(x);
    cb.push_back(y);
    k *= a.dim(x);
  }
  std::vector<std::int64_t> perm_a, perm_b;
  Shape out;
  std::int64_t m = 1, n = 1;
  for (std::int64_t i = 0; i < a.rank(); ++i)
    if (!used_a[std::size_t(i)]) {
      perm_a.push_back(i);
      out.push_back(a.dim(i));
      m *= a.dim(i);
    }
  perm_a.insert(perm_a.end(), ca.begin(), ca.end());
  perm_b = cb;
  for (std::int64_t i = 0; i < b.rank(); ++i)
    if (!used_b[std::size_t(i)]) {
      perm_b.push_back(i);
      out.push_back(b.dim(i));
      n *= b.dim(i);
    }
  Tensor at = perm_a == iota(a.rank()) ? a : transpose(a, perm_a);
  Tensor bt = perm_b == iota(b.rank()) ? b : transpose(b, perm_b);
  // reshape_if keeps a transposed 2-d view as it is, so matmul passes it to BLAS transposed.
  return reshape_if(matmul(reshape_if(at, {m, k}), reshape_if(bt, {k, n})), out);
}

Tensor diag(const Tensor& t) {
  if (t.rank() == 2) return detail::diagonal_view(t, 0, 1);
  if (t.rank() != 1)
    fail("diag", "expected a 1-d or 2-d tensor, got shape ", shape_str(t.shape()));
  const std::int64_t n = t.dim(0);
  // where() serves every dtype (bool included) and carries the gradient.
  return where(eye(n, n, DType::boolean), reshape(t, {1, n}),
               zeros({}, t.dtype()));
}

Tensor trace(const Tensor& t) {
  if (t.rank() != 2) fail("trace", "expected a 2-d tensor, got shape ", shape_str(t.shape()));
  return sum(detail::diagonal_view(t, 0, 1));
}

}  // namespace soma
