// The optimiser update ops: one op per update rule, in place (tag kInplace), no output, no
// gradient. Input 0 is the variable, input 1 its gradient (same shape and dtype), then the slots
// the rule keeps; the per-step scalars (learning rate, bias corrections, ...) are attributes,
// computed once in double by the optimiser (src/optim/optimizers.cpp).
//
//   sgd_update(var, g [, momentum])         attrs lr, decay, momentum, nesterov
//   adam_update(var, g, m, v [, vhat])      attrs alpha, beta_1, beta_2, epsilon, decay
//   nadam_update(var, g, m, v)              attrs lr, beta_1, beta_2, k_m, k_g, k_v, epsilon, decay
//   rmsprop_update(var, g, v [, avg] [, mom])  attrs lr, rho, epsilon, momentum, centered, decay
//   adagrad_update(var, g, acc)             attrs lr, epsilon, decay
//
// "decay" is lr * weight_decay (decoupled weight decay: var -= decay * var, first).
//
// step_scalars (sgd_update and adam_update; FitOptions::cuda_graph, docs/cuda.md "CUDA graphs"):
// the last input is an f64 [2] tensor on the variable's device holding the per-step values
// (sgd: lr, decay; adam: alpha, decay), read when the kernel runs, so that a captured graph's
// replays take each step's values; the attributes of those names are then not used, except that
// a nonzero "decay" says whether there is a weight decay at all. Same results as the attributes.
//
// The kernels registered here are composites of other ops, so they run on every device and floating dtype;
// the CPU kernels replace them by one fused loop over f32/f64 memory
// (src/backend/cpu/optim_updates.cpp), same formula, same order of operations.
#include "internal/optim_updates.hpp"

#include <string>

#include "internal/copy.hpp"
#include "internal/registration.hpp"
#include "soma/autograd.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::detail {

std::atomic<bool>& optim_fused_flag() {
  static std::atomic<bool> on{true};
  return on;
}

namespace {

using Specs = std::vector<TensorSpec>;

// Every input has the variable's shape and (floating) dtype; `want` inputs in all.
void check_update_inputs(const char* op, const Specs& in, std::size_t want) {
  if (in.size() != want)
    fail(op, "expected ", want, " inputs for these attributes (the variable, its gradient and ",
         want - 2, " slot(s)), got ", in.size());
  if (!is_floating(in[0].dtype))
    fail(op, "the variable has dtype ", dtype_name(in[0].dtype),
         "; only floating-point variables can be trained");
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].shape != in[0].shape || in[i].dtype != in[0].dtype)
      fail(op, "input ", i, " is ", dtype_name(in[i].dtype), " ", shape_str(in[i].shape),
           "; expected the variable's ", dtype_name(in[0].dtype), " ", shape_str(in[0].shape));
}

}  // namespace

bool has_step_scalars(const Attrs& a) { return a.has("step_scalars") && a.b("step_scalars"); }

namespace {

// The step-scalars input (the last one) when the attribute says there is one: checked and left
// out of the operands.
Specs without_steps(const char* op, const Specs& in, const Attrs& a) {
  if (!has_step_scalars(a)) return in;
  if (in.empty() || in.back().dtype != DType::f64 || in.back().shape != Shape{2})
    fail(op, "step_scalars: the last input must be the f64 [2] step scalars, got ",
         in.empty() ? std::string("no input")
                    : std::string(dtype_name(in.back().dtype)) + " " + shape_str(in.back().shape));
  return Specs(in.begin(), in.end() - 1);
}

Specs sgd_infer(const Specs& all, const Attrs& a) {
  const Specs in = without_steps("sgd_update", all, a);
  check_update_inputs("sgd_update", in, a.f("momentum") != 0.0 ? 3 : 2);
  return {};
}
Specs adam_infer(const Specs& all, const Attrs& a) {
  const Specs in = without_steps("adam_update", all, a);
  check_update_inputs("adam_update", in, in.size() == 5 ? 5 : 4);
  return {};
}
Specs nadam_infer(const Specs& in, const Attrs&) {
  check_update_inputs("nadam_update", in, 4);
  return {};
}
Specs rmsprop_infer(const Specs& in, const Attrs& a) {
  check_update_inputs("rmsprop_update", in,
                      3 + (a.b("centered") ? 1 : 0) + (a.f("momentum") > 0.0 ? 1 : 0));
  return {};
}
Specs adagrad_infer(const Specs& in, const Attrs&) {
  check_update_inputs("adagrad_update", in, 3);
  return {};
}

// dst <- value, in place (a slot or the variable), recorded as a write.
void store(const Tensor& dst, const Tensor& value) {
  copy_into(value, dst);
  dst.storage()->version.fetch_add(1);
}
// var -= decay * var (decoupled weight decay; nothing when there is none).
void apply_decay(const Tensor& p, double decay) {
  if (decay != 0.0) store(p, p - p * decay);
}

// A per-step value as a 0-d tensor of the variable's dtype: the attribute, or with
// step_scalars entry `i` of the buffer (the last input), cast on the device (T(value), the
// conversion like_scalar's fill makes).
Tensor step_value(const std::vector<Tensor>& in, const Attrs& a, const char* name, int i) {
  const Tensor& p = in[0];
  if (!has_step_scalars(a)) return full_like(Tensor::empty({}, p.dtype(), p.device()), a.f(name));
  return cast(in.back().slice(0, i, i + 1).reshape({}), p.dtype());
}

}  // namespace

// The composites: the optimisers' op-based formulas, the same order as the fused loops.
void sgd_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  NoGradScope no_grad;
  const Tensor &p = in[0], &g = in[1];
  const double mu = a.f("momentum");
  if (has_step_scalars(a)) {  // the same formula with the values from the device
    const Tensor lr = step_value(in, a, "lr", 0);
    if (a.f("decay") != 0.0) store(p, p - p * step_value(in, a, "decay", 1));
    if (mu == 0.0) {
      store(p, p - g * lr);
      return;
    }
    const Tensor& m = in[2];
    store(m, -(g * lr) + m * mu);
    store(p, p + (a.b("nesterov") ? -(g * lr) + m * mu : m));
    return;
  }
  const double lr = a.f("lr");
  apply_decay(p, a.f("decay"));
  if (mu == 0.0) {
    store(p, p - g * lr);
    return;
  }
  const Tensor& m = in[2];
  store(m, -(g * lr) + m * mu);
  store(p, p + (a.b("nesterov") ? -(g * lr) + m * mu : m));
}

void adam_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  NoGradScope no_grad;
  const Tensor &p = in[0], &g = in[1], &m = in[2], &v = in[3];
  const bool steps = has_step_scalars(a);
  if (steps) {
    if (a.f("decay") != 0.0) store(p, p - p * step_value(in, a, "decay", 1));
  } else {
    apply_decay(p, a.f("decay"));
  }
  store(m, m + (g - m) * (1.0 - a.f("beta_1")));
  store(v, v + (square(g) - v) * (1.0 - a.f("beta_2")));
  Tensor vv = v;
  if (in.size() - (steps ? 1 : 0) == 5) {
    store(in[4], maximum(in[4], v));
    vv = in[4];
  }
  if (steps)
    store(p, p - (m * step_value(in, a, "alpha", 0)) / (sqrt(vv) + a.f("epsilon")));
  else
    store(p, p - (m * a.f("alpha")) / (sqrt(vv) + a.f("epsilon")));
}

void nadam_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>&,
                            const Attrs& a) {
  NoGradScope no_grad;
  const Tensor &p = in[0], &g = in[1], &m = in[2], &v = in[3];
  apply_decay(p, a.f("decay"));
  store(m, m + (g - m) * (1.0 - a.f("beta_1")));
  store(v, v + (square(g) - v) * (1.0 - a.f("beta_2")));
  Tensor m_hat = m * a.f("k_m") + g * a.f("k_g");
  Tensor v_hat = v * a.f("k_v");
  store(p, p - (m_hat * a.f("lr")) / (sqrt(v_hat) + a.f("epsilon")));
}

void rmsprop_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>&,
                              const Attrs& a) {
  NoGradScope no_grad;
  const Tensor &p = in[0], &g = in[1], &v = in[2];
  const double rho = a.f("rho"), eps = a.f("epsilon"), mu = a.f("momentum");
  const bool centered = a.b("centered");
  apply_decay(p, a.f("decay"));
  store(v, v * rho + square(g) * (1.0 - rho));
  Tensor denom;
  if (centered) {
    const Tensor& avg = in[3];
    store(avg, avg * rho + g * (1.0 - rho));
    denom = v - square(avg) + eps;
  } else {
    denom = v + eps;
  }
  Tensor inc = (g * a.f("lr")) / sqrt(denom);
  if (mu > 0.0) {
    const Tensor& mom = in[centered ? 4 : 3];
    store(mom, mom * mu + inc);
    store(p, p - mom);
  } else {
    store(p, p - inc);
  }
}

void adagrad_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>&,
                              const Attrs& a) {
  NoGradScope no_grad;
  const Tensor &p = in[0], &g = in[1], &acc = in[2];
  apply_decay(p, a.f("decay"));
  store(acc, acc + square(g));
  store(p, p - (g * a.f("lr")) / sqrt(acc + a.f("epsilon")));
}

namespace {

// The composite kernel on every device; the CPU's is replaced by the fused one.
void register_update(OpDef d, KernelFn composite) {
  d.tags = kInplace | kFloatOnly | kNoGraph | kAutocastF32;  // f32 master weights
  for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = composite;
  // .test stays empty: the registry-driven suite calls an op on fresh inputs and compares its
  // outputs; an update has none (it writes its inputs). tests/unit/test_optim.cpp checks each
  // rule, fused against composite and against Keras' numbers.
  register_op(std::move(d));
}

}  // namespace

void register_optim_update_ops() {
  register_update({.name = "sgd_update", .num_inputs = -1, .infer = sgd_infer,
                   .attrs = {{"lr", 0.0}, {"decay", 0.0}, {"momentum", 0.0},
                             {"nesterov", false}, {"step_scalars", false}}},
                  sgd_update_composite);
  register_update({.name = "adam_update", .num_inputs = -1, .infer = adam_infer,
                   .attrs = {{"alpha", 0.0}, {"beta_1", 0.9}, {"beta_2", 0.999},
                             {"epsilon", 1e-7}, {"decay", 0.0}, {"step_scalars", false}}},
                  adam_update_composite);
  register_update({.name = "nadam_update", .num_inputs = 4, .infer = nadam_infer,
                   .attrs = {{"lr", 0.0}, {"beta_1", 0.9}, {"beta_2", 0.999}, {"k_m", 0.0},
                             {"k_g", 0.0}, {"k_v", 1.0}, {"epsilon", 1e-7}, {"decay", 0.0}}},
                  nadam_update_composite);
  register_update({.name = "rmsprop_update", .num_inputs = -1, .infer = rmsprop_infer,
                   .attrs = {{"lr", 0.0}, {"rho", 0.9}, {"epsilon", 1e-7}, {"momentum", 0.0},
                             {"centered", false}, {"decay", 0.0}}},
                  rmsprop_update_composite);
  register_update({.name = "adagrad_update", .num_inputs = 3, .infer = adagrad_infer,
                   .attrs = {{"lr", 0.0}, {"epsilon", 1e-7}, {"decay", 0.0}}},
                  adagrad_update_composite);
}

}  // namespace soma::detail
