// CUDA kernels of the optimiser update ops (src/ops/optim_updates.cpp): one fused kernel per
// update (update_kernels.cu, the rules of src/ops/update_formulas.hpp) instead of the composite's
// dozen elementwise launches and temporaries. For packed f32/f64 operands of one dtype on one
// device with fused kernels on (Optimizer::set_fused_kernels), as on the CPU; anything else (f16,
// bf16, strided slots) runs the op's composite kernel.
#include "backend/cuda/runtime.hpp"
#include "backend/cuda/update_launch.hpp"
#include "internal/optim_updates.hpp"
#include "soma/op.hpp"

namespace soma::cuda_detail {
namespace {

bool can_fuse(const std::vector<Tensor>& in) {
  if (!detail::optim_fused_flag().load(std::memory_order_relaxed)) return false;
  const DType t = in[0].dtype();
  if (t != DType::f32 && t != DType::f64) return false;
  for (const Tensor& x : in)
    if (x.dtype() != t || !x.is_contiguous() || x.device() != in[0].device()) return false;
  return true;
}

template <class T>
T* ptr(const Tensor* t) {
  if (!t) return nullptr;
  return reinterpret_cast<T*>(static_cast<char*>(t->storage()->data) +
                              t->offset() * std::int64_t(sizeof(T)));
}

// Runs make_rule(T{}) over the variable (in[0]), its gradient (in[1]) and the slots s0..s2.
template <class MakeRule>
void run(const char* op, const std::vector<Tensor>& in, const Tensor* s0, const Tensor* s1,
         const Tensor* s2, MakeRule&& make_rule, const Tensor* steps = nullptr) {
  const Tensor &var = in[0], &g = in[1];
  const std::int64_t n = var.numel();
  if (n == 0) return;
  const int d = use_device(var.device().index, op);
  cudaError_t st;
  if (var.dtype() == DType::f32)
    st = launch_update(make_rule(float{}), ptr<double>(steps), ptr<float>(&var), ptr<float>(&g),
                       ptr<float>(s0), ptr<float>(s1), ptr<float>(s2), n, stream(d));
  else
    st = launch_update(make_rule(double{}), ptr<double>(steps), ptr<double>(&var),
                       ptr<double>(&g), ptr<double>(s0), ptr<double>(s1), ptr<double>(s2), n,
                       stream(d));
  check(st, op, "kernel launch", d);
  // As on the CPU: weights cached elsewhere are keyed by the variable's version.
  var.storage()->version.fetch_add(1);
}

// With the attribute step_scalars, the last input is the f64 buffer of the per-step values
// (ops/update_formulas.hpp set_step): the kernel reads them, the rest is as without.
bool with_steps(const std::vector<Tensor>& in, const Attrs& a, std::vector<Tensor>& operands,
                const Tensor*& steps) {
  if (!detail::has_step_scalars(a)) return can_fuse(in);
  operands.assign(in.begin(), in.end() - 1);
  const Tensor& s = in.back();
  if (s.dtype() != DType::f64 || !s.is_contiguous() || s.device() != in[0].device()) return false;
  steps = &s;
  return can_fuse(operands);
}

void sgd_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  std::vector<Tensor> ops;
  const Tensor* steps = nullptr;
  if (!with_steps(in, a, ops, steps)) return detail::sgd_update_composite(in, out, a);
  const std::vector<Tensor>& x = steps ? ops : in;
  const double lr = a.f("lr"), decay = a.f("decay"), mu = a.f("momentum");
  const bool nesterov = a.b("nesterov");
  run("sgd_update", x, mu != 0.0 ? &x[2] : nullptr, nullptr, nullptr, [&](auto tag) {
    return upd::Sgd<decltype(tag)>::make(lr, decay, mu, nesterov);
  }, steps);
}

void adam_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  std::vector<Tensor> ops;
  const Tensor* steps = nullptr;
  if (!with_steps(in, a, ops, steps)) return detail::adam_update_composite(in, out, a);
  const std::vector<Tensor>& x = steps ? ops : in;
  const double alpha = a.f("alpha"), b1 = a.f("beta_1"), b2 = a.f("beta_2"),
               eps = a.f("epsilon"), decay = a.f("decay");
  const bool amsgrad = x.size() == 5;
  run("adam_update", x, &x[2], &x[3], amsgrad ? &x[4] : nullptr, [&](auto tag) {
    return upd::Adam<decltype(tag)>::make(alpha, b1, b2, eps, decay, amsgrad);
  }, steps);
}

void nadam_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  if (!can_fuse(in)) return detail::nadam_update_composite(in, out, a);
  const double lr = a.f("lr"), b1 = a.f("beta_1"), b2 = a.f("beta_2"), k_m = a.f("k_m"),
               k_g = a.f("k_g"), k_v = a.f("k_v"), eps = a.f("epsilon"), decay = a.f("decay");
  run("nadam_update", in, &in[2], &in[3], nullptr, [&](auto tag) {
    return upd::Nadam<decltype(tag)>::make(lr, b1, b2, k_m, k_g, k_v, eps, decay);
  });
}

void rmsprop_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  if (!can_fuse(in)) return detail::rmsprop_update_composite(in, out, a);
  const double lr = a.f("lr"), rho = a.f("rho"), eps = a.f("epsilon"), mu = a.f("momentum"),
               decay = a.f("decay");
  const bool centered = a.b("centered");
  const Tensor* avg = centered ? &in[3] : nullptr;
  const Tensor* mom = mu > 0.0 ? &in[centered ? 4 : 3] : nullptr;
  run("rmsprop_update", in, &in[2], avg, mom, [&](auto tag) {
    return upd::Rmsprop<decltype(tag)>::make(lr, rho, eps, mu, centered, decay);
  });
}

void adagrad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  if (!can_fuse(in)) return detail::adagrad_update_composite(in, out, a);
  const double lr = a.f("lr"), eps = a.f("epsilon"), decay = a.f("decay");
  run("adagrad_update", in, &in[2], nullptr, nullptr,
      [&](auto tag) { return upd::Adagrad<decltype(tag)>::make(lr, eps, decay); });
}

}  // namespace

void register_cuda_update_kernels() {
  register_kernel("sgd_update", DeviceKind::CUDA, sgd_kernel);
  register_kernel("adam_update", DeviceKind::CUDA, adam_kernel);
  register_kernel("nadam_update", DeviceKind::CUDA, nadam_kernel);
  register_kernel("rmsprop_update", DeviceKind::CUDA, rmsprop_kernel);
  register_kernel("adagrad_update", DeviceKind::CUDA, adagrad_kernel);
}

}  // namespace soma::cuda_detail
