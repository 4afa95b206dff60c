// dense_bias_act(x, kernel [, bias]) -> act(x @ kernel + bias): Dense's forward as one op.
//
//   x [..., k], kernel [k, n], bias [n] (optional), one floating dtype; output [..., n].
//   attr "activation": "linear" or "relu" (the activations the kernels apply in the same pass;
//   a Dense layer with any other activation calls this op with "linear", then the activation).
//
// The gradient is written with ops, the ones matmul + add + relu record (ReLU's mask read from
// the output: y > 0 exactly where the pre-activation is). The CPU kernel
// (src/backend/cpu/dense.cpp) runs the fused GEMV for small unrecorded f32 products and the
// matmul kernel plus one bias/activation pass otherwise; on other devices a composite of ops.
#include "internal/dense_op.hpp"

#include "internal/copy.hpp"
#include "internal/optim_updates.hpp"
#include "internal/registration.hpp"
#include "internal/relu_gradient.hpp"
#include "soma/autograd.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::detail {

namespace {

struct DenseActivation {
  const char* name;
  bool relu;
};
// The activations the kernels apply (a table: a new one is a row here and a branch in the
// kernels' bias pass).
constexpr DenseActivation kDenseActivations[] = {{"linear", false}, {"relu", true}};

using Specs = std::vector<TensorSpec>;

Specs dense_infer(const Specs& in, const Attrs& a) {
  const char* op = "dense_bias_act";
  if (in.size() != 2 && in.size() != 3)
    fail(op, "expected 2 or 3 inputs (x, kernel [, bias]), got ", in.size());
  dense_relu(a);  // a known activation
  const Shape &xs = in[0].shape, &ws = in[1].shape;
  if (!is_floating(in[0].dtype))
    fail(op, "dtype ", dtype_name(in[0].dtype), " is not supported (expected f32, f64, f16 or bf16)");
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].dtype != in[0].dtype)
      fail(op, "dtypes differ: x is ", dtype_name(in[0].dtype), ", input ", i, " is ",
           dtype_name(in[i].dtype));
  if (ws.size() != 2) fail(op, "kernel must be 2-d [in, units], got ", shape_str(ws));
  if (xs.size() < 2 || xs.back() != ws[0])
    fail(op, "x of shape ", shape_str(xs), " does not fit kernel ", shape_str(ws),
         ": expected [batch, ..., ", ws[0], "]");
  if (in.size() == 3 && in[2].shape != Shape{ws[1]})
    fail(op, "bias of shape ", shape_str(in[2].shape), " does not match the kernel's ", ws[1],
         " units: expected [", ws[1], "]");
  Shape ys = xs;
  ys.back() = ws[1];
  return {{std::move(ys), in[0].dtype}};
}

Tensor swap_last_two(const Tensor& t) {
  std::vector<std::int64_t> perm(std::size_t(t.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}

// relu (from the output), then add's and matmul's gradients.
std::vector<Tensor> dense_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const Tensor g = dense_relu(c.attrs) ? relu_gradient(c.outputs[0], c.grads[0]) : c.grads[0];
  std::vector<Tensor> out(c.inputs.size());
  if (c.needs(0)) out[0] = matmul(g, swap_last_two(w));
  if (c.needs(1)) {
    Tensor dw = matmul(swap_last_two(x), g);
    out[1] = dw.shape() == w.shape() ? dw : sum_to(dw, w.shape());
  }
  if (c.inputs.size() == 3 && c.needs(2)) out[2] = sum_to(g, c.inputs[2].shape());
  return out;
}


// The test table's reference: act(x @ kernel + bias) in f64 with loops.
std::vector<Tensor> dense_reference(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor x = contiguous(cast(in[0], DType::f64)), w = contiguous(cast(in[1], DType::f64));
  const std::int64_t k = w.dim(0), n = w.dim(1), m = k > 0 ? x.numel() / k : 0;
  const std::vector<double> b = in.size() == 3 ? cast(in[2], DType::f64).to_vector<double>()
                                               : std::vector<double>(std::size_t(n), 0.0);
  Shape ys = x.shape();
  ys.back() = n;
  Tensor y = Tensor::empty(ys, DType::f64);
  const double *px = x.data<double>(), *pw = w.data<double>();
  double* py = y.data<double>();
  const bool relu = dense_relu(a);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = b[std::size_t(j)];
      for (std::int64_t q = 0; q < k; ++q) s += px[i * k + q] * pw[q * n + j];
      py[i * n + j] = relu && !(s > 0.0) && s == s ? 0.0 : s;
    }
  return {y};
}

// The two attribute lists Dense passes, built once (on first use: layers may be made during
// static initialisation). One guarded static for both: dense_relu reads them on every call.
struct DenseAttrLists {
  Attrs linear{{"activation", std::string("linear")}};
  Attrs relu{{"activation", std::string("relu")}};
};
const DenseAttrLists& dense_attr_lists() {
  static const DenseAttrLists lists;
  return lists;
}

}  // namespace

// Any device: the ops themselves.
void dense_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  NoGradScope no_grad;
  Tensor y = matmul(in[0], in[1]);
  if (in.size() == 3) y = y + in[2];
  if (dense_relu(a)) y = relu(y);
  copy_into(y, out[0]);
}

bool dense_relu(const Attrs& a) {
  // The shared lists first: every call from Dense and Sequential's chain passes one of them, and
  // an attribute lookup plus name comparisons per call is a visible part of batch-1 inference.
  const DenseAttrLists& lists = dense_attr_lists();
  if (&a == &lists.relu) return true;
  if (&a == &lists.linear) return false;
  const std::string& name = a.s("activation");
  for (const DenseActivation& d : kDenseActivations)
    if (name == d.name) return d.relu;
  std::string known;
  for (const DenseActivation& d : kDenseActivations) known += std::string(known.empty() ? "" : ", ") + d.name;
  fail("dense_bias_act", "unknown activation '", name, "' (expected one of ", known, ")");
}

const Attrs& dense_attrs(bool relu) {
  const DenseAttrLists& lists = dense_attr_lists();
  return relu ? lists.relu : lists.linear;
}

void register_layer_ops() {
  OpDef d{.name = "dense_bias_act", .num_inputs = -1, .infer = dense_infer, .grad = dense_grad,
          .tags = kAutocastLow, .attrs = {{"activation", std::string("linear")}},
          .test = {.shapes = {{2, 3, 4}, {4, 5}, {5}},
                   .attrs = {{"activation", std::string("linear")}},
                   .reference = dense_reference}};
  for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = dense_composite_kernel;
  register_op(std::move(d));
  register_optim_update_ops();
}

}  // namespace soma::detail
