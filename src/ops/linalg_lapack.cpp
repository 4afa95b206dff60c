// The LAPACK-backed linalg ops (soma/linalg.hpp): solve, inv, det, slogdet, cholesky, qr, svd,
// eigh. Definitions, shape rules and gradients (written with ops) live here; the CPU kernels
// in src/backend/cpu/lapack.cpp, the CUDA ones in src/backend/cuda/linalg_host.cpp.
#include <algorithm>

#include "internal/registration.hpp"
#include "references_linalg.hpp"
#include "soma/linalg.hpp"
#include "soma/op.hpp"
#include "soma/op_testing.hpp"
#include "soma/ops.hpp"

namespace soma {
namespace {

// ---- shape rules ----
void need_float(const char* op, DType t) {
  if (t != DType::f32 && t != DType::f64)
    fail(op, "expected f32 or f64, got ", dtype_name(t), " (LAPACK works in f32 and f64)");
}
void need_matrices(const char* op, const Shape& s, bool square) {
  if (s.size() < 2)
    fail(op, "expected a [..., m, n] tensor of matrices, got shape ", shape_str(s));
  if (square && s[s.size() - 1] != s[s.size() - 2])
    fail(op, "expected square matrices [..., n, n], got shape ", shape_str(s));
}
Shape lead_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
Shape with(Shape lead, std::initializer_list<std::int64_t> tail) {
  lead.insert(lead.end(), tail.begin(), tail.end());
  return lead;
}

const TensorSpec& square_input(const char* op, const std::vector<TensorSpec>& in) {
  need_matrices(op, in[0].shape, true);
  need_float(op, in[0].dtype);
  return in[0];
}

std::vector<TensorSpec> solve_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  const TensorSpec& a = square_input("linalg_solve", in);
  const Shape& b = in[1].shape;
  if (in[1].dtype != a.dtype)
    fail("linalg_solve", "dtypes differ: A is ", dtype_name(a.dtype), ", B is ",
         dtype_name(in[1].dtype));
  if (b.size() != a.shape.size() || lead_of(b) != lead_of(a.shape) || b[b.size() - 2] != a.shape.back())
    fail("linalg_solve", "expected B of shape [..., ", a.shape.back(),
         ", k] with A's batch dims, got A ", shape_str(a.shape), " and B ", shape_str(b));
  return {{b, a.dtype}};
}
std::vector<TensorSpec> inv_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return {square_input("linalg_inv", in)};
}
std::vector<TensorSpec> det_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  const TensorSpec& a = square_input("linalg_det", in);
  return {{lead_of(a.shape), a.dtype}};
}
std::vector<TensorSpec> slogdet_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  const TensorSpec& a = square_input("linalg_slogdet", in);
  return {{lead_of(a.shape), a.dtype}, {lead_of(a.shape), a.dtype}};
}
std::vector<TensorSpec> cholesky_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  return {square_input("linalg_cholesky", in)};
}
std::vector<TensorSpec> qr_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  need_matrices("linalg_qr", in[0].shape, false);
  need_float("linalg_qr", in[0].dtype);
  const Shape& s = in[0].shape;
  const std::int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
  return {{with(lead_of(s), {m, k}), in[0].dtype}, {with(lead_of(s), {k, n}), in[0].dtype}};
}
std::vector<TensorSpec> svd_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  need_matrices("linalg_svd", in[0].shape, false);
  need_float("linalg_svd", in[0].dtype);
  const Shape& s = in[0].shape;
  const std::int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
  const DType t = in[0].dtype;
  return {{with(lead_of(s), {m, k}), t}, {with(lead_of(s), {k}), t}, {with(lead_of(s), {k, n}), t}};
}
std::vector<TensorSpec> eigh_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  const TensorSpec& a = square_input("linalg_eigh", in);
  return {{with(lead_of(a.shape), {a.shape.back()}), a.dtype}, a};
}

// ---- gradient helpers (all ops, so gradients of gradients work too) ----
Tensor mT(const Tensor& t) {
  std::vector<std::int64_t> perm(std::size_t(t.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}
Tensor col(const Tensor& v) { return expand_dims(v, -2); }  // [..., k] -> [..., 1, k]
Tensor row(const Tensor& v) { return expand_dims(v, -1); }  // [..., k] -> [..., k, 1]
Tensor eye_like(std::int64_t n, const Tensor& like) {
  return eye(n, n, like.dtype()).to(like.device());
}
// 1 below the diagonal, 1/2 on it, 0 above. It is the adjoint of "the lower triangle with
// halved diagonal" (cholesky), and (G + G^T) * it maps the gradient G of a function of a
// symmetric S to the gradient of the same function of the lower triangle that S is built from.
Tensor lower_half(std::int64_t n, const Tensor& like) {
  Tensor i = arange(double(n), DType::f64);
  Tensor below = cast(greater(reshape(i, {n, 1}), reshape(i, {1, n})), DType::f64);
  return cast(below + eye(n, n, DType::f64) * 0.5, like.dtype()).to(like.device());
}
// The gradient w.r.t. the lower triangle read by cholesky/eigh, from the gradient g_s w.r.t.
// the symmetric matrix built from it.
Tensor to_lower(const Tensor& g_s) { return (g_s + mT(g_s)) * lower_half(g_s.dim(-1), g_s); }
// [..., n, k] slices of the last axis.
Tensor cols(const Tensor& t, std::int64_t start, std::int64_t stop) {
  std::vector<Slice> s(std::size_t(t.rank()));
  s.back() = Slice{start, stop};
  return slice(t, s);
}
// X R^{-T} for an upper triangular invertible R.
Tensor times_inv_rt(const Tensor& x, const Tensor& r) { return mT(linalg::solve(r, mT(x))); }

// X = A^-1 B: dB = A^-T dX, dA = -dB X^T.
std::vector<Tensor> solve_grad(const GradContext& c) {
  Tensor gb = linalg::solve(mT(c.inputs[0]), c.grads[0]);
  return {-matmul(gb, mT(c.outputs[0])), gb};
}
// Y = A^-1: dA = -Y^T dY Y^T.
std::vector<Tensor> inv_grad(const GradContext& c) {
  const Tensor yt = mT(c.outputs[0]);
  return {-matmul(matmul(yt, c.grads[0]), yt)};
}
// d det(A) = det(A) tr(A^-1 dA): dA = g det(A) A^-T (A must be invertible).
std::vector<Tensor> det_grad(const GradContext& c) {
  return {row(row(c.grads[0] * c.outputs[0])) * mT(linalg::inv(c.inputs[0]))};
}
std::vector<Tensor> slogdet_grad(const GradContext& c) {  // sign: piecewise constant
  return {row(row(c.grads[1])) * mT(linalg::inv(c.inputs[0]))};
}
// S = L L^T: dS = L^-T (M o L^T dL) L^-1 with M lower_half (Phi's adjoint), then to the lower
// triangle.
std::vector<Tensor> cholesky_grad(const GradContext& c) {
  const Tensor& l = c.outputs[0];
  const Tensor li = linalg::inv(l);
  const Tensor inner = matmul(mT(l), c.grads[0]) * lower_half(l.dim(-1), l);
  return {to_lower(matmul(matmul(mT(li), inner), li))};
}
// A = QR with m >= n: dA = (dQ + Q N) R^-T, N the symmetric matrix whose upper triangle is that
// of dR R^T - Q^T dQ (from Q^T dQ skew and dR R^-1 upper triangular).
Tensor qr_grad_tall(const Tensor& q, const Tensor& r, const Tensor& gq, const Tensor& gr) {
  const Tensor mx = matmul(gr, mT(r)) - matmul(mT(q), gq);
  const Tensor upper = mx * mT(lower_half(mx.dim(-1), mx));
  return times_inv_rt(gq + matmul(q, upper + mT(upper)), r);
}
// m < n: A = [X Y] with X = Q R1 square and R2 = Q^T Y, so Y feeds Q's gradient too.
std::vector<Tensor> qr_grad(const GradContext& c) {
  const Tensor &a = c.inputs[0], &q = c.outputs[0], &r = c.outputs[1];
  const Tensor &gq = c.grads[0], &gr = c.grads[1];
  const std::int64_t m = a.dim(-2), n = a.dim(-1);
  if (m >= n) return {qr_grad_tall(q, r, gq, gr)};
  const Tensor y = cols(a, m, n), gr2 = cols(gr, m, n);
  const Tensor gx = qr_grad_tall(q, cols(r, 0, m), gq + matmul(y, mT(gr2)), cols(gr, 0, m));
  return {concat({gx, matmul(q, gr2)}, -1)};
}
// F_ij = 1 / (x_j - x_i) off the diagonal, 0 on it.
Tensor inverse_gaps(const Tensor& x) {
  const Tensor id = eye_like(x.dim(-1), x);
  return (1.0 - id) / (col(x) - row(x) + id);
}
// A = V diag(w) V^T: dS = V (diag(dw) + F o V^T dV) V^T, F_ij = 1/(w_j - w_i).
std::vector<Tensor> eigh_grad(const GradContext& c) {
  const Tensor &w = c.outputs[0], &v = c.outputs[1];
  const Tensor inner = eye_like(w.dim(-1), w) * row(c.grads[0]) +
                       inverse_gaps(w) * matmul(mT(v), c.grads[1]);
  return {to_lower(matmul(matmul(v, inner), mT(v)))};
}
// A = U S V^T (reduced, real, distinct non-zero singular values), Townsend's formula:
// dA = U [J S + diag(dS) + S K] V^T + (I - U U^T) dU S^-1 V^T + U S^-1 dV^T (I - V V^T),
// J = F o (U^T dU - dU^T U), K = F o (V^T dV - dV^T V), F_ij = 1/(s_j^2 - s_i^2).
std::vector<Tensor> svd_grad(const GradContext& c) {
  const Tensor &u = c.outputs[0], &s = c.outputs[1], v = mT(c.outputs[2]);
  const Tensor &gu = c.grads[0], &gs = c.grads[1], gv = mT(c.grads[2]);
  const Tensor f = inverse_gaps(s * s);
  const Tensor utgu = matmul(mT(u), gu), vtgv = matmul(mT(v), gv);
  const Tensor j = f * (utgu - mT(utgu)), k = f * (vtgv - mT(vtgv));
  const Tensor inner = j * col(s) + eye_like(s.dim(-1), s) * row(gs) + row(s) * k;
  const Tensor inv_s = 1.0 / s;
  const Tensor gu_s = gu * col(inv_s);                 // dU S^-1
  const Tensor gvt_s = row(inv_s) * mT(gv);            // S^-1 dV^T
  Tensor ga = matmul(matmul(u, inner), mT(v));
  ga = ga + matmul(gu_s - matmul(u, matmul(mT(u), gu_s)), mT(v));
  ga = ga + matmul(u, gvt_s - matmul(matmul(gvt_s, v), mT(v)));
  return {ga};
}

// ---- test inputs ----
// A + diag(-n, n, ..., n): the uniform samples in [-1, 1] become diagonally dominant, so well
// conditioned, with a negative determinant (the sign path of det and slogdet).
std::vector<Tensor> invertible_inputs(const std::vector<Tensor>& in) {
  std::vector<Tensor> out = in;
  const std::int64_t n = in[0].dim(-1);
  std::vector<double> d(std::size_t(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) d[std::size_t(i * n + i)] = i == 0 ? -double(n) : double(n);
  out[0] = in[0] + constant(d, {n, n});
  return out;
}
// A A^T + n I: symmetric positive definite and well conditioned.
std::vector<Tensor> spd_inputs(const std::vector<Tensor>& in) {
  const std::int64_t n = in[0].dim(-1);
  return {matmul(in[0], mT(in[0])) + eye(n, n, in[0].dtype()) * double(n)};
}
// Distinct, well separated singular values: A + diag(3, 6, 9, ...) on the leading square.
std::vector<Tensor> separated_inputs(const std::vector<Tensor>& in) {
  const std::int64_t m = in[0].dim(-2), n = in[0].dim(-1), k = std::min(m, n);
  std::vector<double> d(std::size_t(m * n), 0.0);
  for (std::int64_t i = 0; i < k; ++i) d[std::size_t(i * n + i)] = 3.0 * double(i + 1);
  return {in[0] + constant(d, {m, n})};
}

}  // namespace

namespace detail {
void register_lapack_ops() {
  register_op({.name = "linalg_solve", .num_inputs = 2, .infer = solve_infer, .grad = solve_grad,
               .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 3}, {2, 3, 2}}, .lo = -1, .hi = 1,
                        .reference = ref::linalg_solve}});
  register_op({.name = "linalg_inv", .num_inputs = 1, .infer = inv_infer, .grad = inv_grad,
               .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 3}}, .lo = -1, .hi = 1, .reference = ref::linalg_inv}});
  register_op({.name = "linalg_det", .num_inputs = 1, .infer = det_infer, .grad = det_grad,
               .tags = kFloatOnly, .onnx = {.op_type = "Det", .min_opset = 11},
               .test = {.shapes = {{2, 3, 3}}, .lo = -1, .hi = 1, .reference = ref::linalg_det}});
  register_op({.name = "linalg_slogdet", .num_inputs = 1, .infer = slogdet_infer,
               .grad = slogdet_grad, .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 3}}, .lo = -1, .hi = 1,
                        .reference = ref::linalg_slogdet}});
  register_op({.name = "linalg_cholesky", .num_inputs = 1, .infer = cholesky_infer,
               .grad = cholesky_grad, .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 3}}, .lo = -1, .hi = 1,
                        .reference = ref::linalg_cholesky}});
  register_op({.name = "linalg_qr", .num_inputs = 1, .infer = qr_infer, .grad = qr_grad,
               .tags = kFloatOnly,
               .test = {.shapes = {{2, 4, 3}}, .lo = -1, .hi = 1, .reference = ref::linalg_qr}});
  register_op({.name = "linalg_svd", .num_inputs = 1, .infer = svd_infer, .grad = svd_grad,
               .tags = kFloatOnly,
               .test = {.shapes = {{2, 4, 3}}, .lo = -1, .hi = 1, .reference = ref::linalg_svd}});
  register_op({.name = "linalg_eigh", .num_inputs = 1, .infer = eigh_infer, .grad = eigh_grad,
               .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 3}}, .lo = -1, .hi = 1, .reference = ref::linalg_eigh}});
  // The samples made invertible, positive definite or well separated (soma/op_testing.hpp).
  for (const char* op : {"linalg_solve", "linalg_inv", "linalg_det", "linalg_slogdet"})
    set_test_inputs_prepare(op, invertible_inputs);
  set_test_inputs_prepare("linalg_cholesky", spd_inputs);
  for (const char* op : {"linalg_qr", "linalg_svd", "linalg_eigh"})
    set_test_inputs_prepare(op, separated_inputs);
}
}  // namespace detail

namespace linalg {

Tensor solve(const Tensor& a, const Tensor& b) {
  static const OpDef& d = get_op("linalg_solve");
  if (!a.defined() || !b.defined()) fail("linalg_solve", "an input is an undefined Tensor");
  // B [..., n] with A [..., n, n]: one right-hand side per matrix (NumPy's vector case).
  if (a.rank() >= 2 && b.rank() == a.rank() - 1 &&
      Shape(b.shape().begin(), b.shape().end() - 1) == lead_of(a.shape()))
    return squeeze(call_op1(d, {a, expand_dims(b, -1)}), {-1});
  // Batch dims broadcast (NumPy's rule) before the op, which takes equal ones; broadcast_to's
  // gradient sums back over them.
  if (a.rank() >= 2 && b.rank() >= 2 && lead_of(a.shape()) != lead_of(b.shape())) {
    const Shape batch = broadcast_shapes(lead_of(a.shape()), lead_of(b.shape()), "linalg_solve");
    return call_op1(d, {broadcast_to(a, with(batch, {a.dim(-2), a.dim(-1)})),
                        broadcast_to(b, with(batch, {b.dim(-2), b.dim(-1)}))});
  }
  return call_op1(d, {a, b});
}
Tensor inv(const Tensor& a) {
  static const OpDef& d = get_op("linalg_inv");
  return call_op1(d, {a});
}
Tensor det(const Tensor& a) {
  static const OpDef& d = get_op("linalg_det");
  return call_op1(d, {a});
}
SlogdetResult slogdet(const Tensor& a) {
  static const OpDef& d = get_op("linalg_slogdet");
  auto r = call_op(d, {a});
  return {r[0], r[1]};
}
Tensor cholesky(const Tensor& a) {
  static const OpDef& d = get_op("linalg_cholesky");
  return call_op1(d, {a});
}
QRResult qr(const Tensor& a) {
  static const OpDef& d = get_op("linalg_qr");
  auto r = call_op(d, {a});
  return {r[0], r[1]};
}
SVDResult svd(const Tensor& a) {
  static const OpDef& d = get_op("linalg_svd");
  auto r = call_op(d, {a});
  return {r[0], r[1], r[2]};
}
EighResult eigh(const Tensor& a) {
  static const OpDef& d = get_op("linalg_eigh");
  auto r = call_op(d, {a});
  return {r[0], r[1]};
}

}  // namespace linalg
}  // namespace soma
