// CPU kernels of the optimiser update ops (src/ops/optim_updates.cpp): one fused loop per rule
// over raw f32/f64 memory (one pass, no temporaries, split across threads), for contiguous
// operands of one dtype; anything else runs the op's composite kernel. Both follow the same
// formula in the same order. This file is built with -fno-math-errno so that sqrt vectorises.
#include <algorithm>
#include <cmath>

#include "internal/optim_updates.hpp"
#include "internal/parallel.hpp"
#include "soma/op.hpp"

#define SOMA_ISA_FILE "backend/cpu/optim_updates.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
SOMA_ISA_BEGIN

namespace {

// Whether the fused loop may run: fused kernels on, every operand a contiguous f32/f64 CPU
// tensor of the variable's dtype.
bool can_fuse(const std::vector<Tensor>& in) {
  if (!optim_fused_flag().load(std::memory_order_relaxed)) return false;
  const DType t = in[0].dtype();
  if (t != DType::f32 && t != DType::f64) return false;
  for (const Tensor& x : in)
    if (x.dtype() != t || !x.is_contiguous() || !x.device().is_cpu()) return false;
  return true;
}

// Calls f(T{}) with T = float or double, the variable's dtype.
template <class F>
void with_float(DType t, F&& f) {
  if (t == DType::f32)
    f(float{});
  else
    f(double{});
}

// f(begin, end) over the variable's elements, split across threads for big variables.
template <class F>
void for_range(std::int64_t n, F&& f) {
  parallel_for(n, kParallelGrain, std::forward<F>(f));
}

// Records the in-place write to the variable's memory (weights cached elsewhere, e.g. oneDNN's
// reordered convolution weights, are keyed by this version).
void mark_written(const Tensor& var) { var.storage()->version.fetch_add(1); }

// step_scalars (src/ops/optim_updates.cpp): on the CPU the values are read here and the update
// runs as with attributes; on a device (the CPU stand-in of the tests) the composite reads them.
// Returns false when there is no step-scalars input.
template <class Kernel>
bool with_step_scalars(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& at,
                       const char* first, Kernel kernel, KernelFn composite) {
  if (!has_step_scalars(at)) return false;
  const Tensor& s = in.back();
  if (!s.device().is_cpu()) {
    composite(in, out, at);
    return true;
  }
  const Tensor sc = s.contiguous();
  const double* v = sc.data<double>();
  Attrs a = at;
  a.set(first, v[0]).set("decay", v[1]).set("step_scalars", false);
  const std::vector<Tensor> operands(in.begin(), in.end() - 1);
  kernel(operands, out, a);
  return true;
}

void sgd_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& at) {
  if (with_step_scalars(in, out, at, "lr", sgd_update_kernel, sgd_update_composite)) return;
  if (!can_fuse(in)) return sgd_update_composite(in, out, at);
  const double lr = at.f("lr"), wd = at.f("decay"), mu = at.f("momentum");
  const Tensor &var = in[0], &g = in[1];
  const std::int64_t n = var.numel();
  if (mu == 0.0) {
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.data<T>();
      const T* gp = g.data<T>();
      const T a = T(lr), d = T(wd);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T x = p[i];
          if (wd != 0.0) x -= x * d;
          p[i] = x - gp[i] * a;
        }
      });
    });
    mark_written(var);
    return;
  }
  const Tensor& m = in[2];
  const bool nesterov = at.b("nesterov");
  with_float(var.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = var.data<T>();
    T* mp = m.data<T>();
    const T* gp = g.data<T>();
    const T a = T(lr), d = T(wd), k = T(mu);
    for_range(n, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T x = p[i];
        if (wd != 0.0) x -= x * d;
        const T mi = -gp[i] * a + mp[i] * k;
        mp[i] = mi;
        p[i] = nesterov ? x + (-gp[i] * a + mi * k) : x + mi;
      }
    });
  });
  mark_written(var);
}

// One Adam step over n elements. Separate pointers (restrict) and compile-time branches keep
// the loop vectorisable.
template <class T, bool kDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict gp, T* __restrict mp, T* __restrict vp,
               T* __restrict hp, std::int64_t n, T c1, T c2, T al, T ep, T d) {
  for (std::int64_t i = 0; i < n; ++i) {
    T x = p[i];
    if constexpr (kDecay) x -= x * d;
    const T gi = gp[i];
    const T mi = mp[i] + (gi - mp[i]) * c1;
    const T vi = vp[i] + (gi * gi - vp[i]) * c2;
    mp[i] = mi;
    vp[i] = vi;
    T vv = vi;
    if constexpr (kAmsgrad) {
      vv = std::max(hp[i], vi);
      hp[i] = vv;
    }
    p[i] = x - (mi * al) / (std::sqrt(vv) + ep);
  }
}

void adam_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                        const Attrs& at) {
  if (with_step_scalars(in, out, at, "alpha", adam_update_kernel, adam_update_composite)) return;
  if (!can_fuse(in)) return adam_update_composite(in, out, at);
  const double wd = at.f("decay"), b1 = at.f("beta_1"), b2 = at.f("beta_2");
  const double alpha = at.f("alpha"), eps = at.f("epsilon");
  const Tensor &var = in[0], &g = in[1], &m = in[2], &v = in[3];
  const Tensor* vhat = in.size() == 5 ? &in[4] : nullptr;
  const std::int64_t n = var.numel();
  with_float(var.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = var.data<T>();
    const T* gp = g.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    T* hp = vhat ? vhat->data<T>() : nullptr;
    const T c1 = T(1.0 - b1), c2 = T(1.0 - b2), al = T(alpha), ep = T(eps), d = T(wd);
    for_range(n, [&](std::int64_t b, std::int64_t e) {
      if (!hp && wd == 0.0)  // the common case, as one branch-free loop the compiler vectorises
        adam_loop<T, false, false>(p + b, gp + b, mp + b, vp + b, nullptr, e - b, c1, c2, al, ep,
                                   d);
      else if (!hp)
        adam_loop<T, true, false>(p + b, gp + b, mp + b, vp + b, nullptr, e - b, c1, c2, al, ep,
                                  d);
      else if (wd == 0.0)
        adam_loop<T, false, true>(p + b, gp + b, mp + b, vp + b, hp + b, e - b, c1, c2, al, ep,
                                  d);
      else
        adam_loop<T, true, true>(p + b, gp + b, mp + b, vp + b, hp + b, e - b, c1, c2, al, ep, d);
    });
  });
  mark_written(var);
}

void nadam_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& at) {
  if (!can_fuse(in)) return nadam_update_composite(in, out, at);
  const double lr = at.f("lr"), wd = at.f("decay"), b1 = at.f("beta_1"), b2 = at.f("beta_2");
  const double k_m = at.f("k_m"), k_g = at.f("k_g"), k_v = at.f("k_v"), eps = at.f("epsilon");
  const Tensor &var = in[0], &g = in[1], &m = in[2], &v = in[3];
  const std::int64_t n = var.numel();
  with_float(var.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = var.data<T>();
    const T* gp = g.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    const T c1 = T(1.0 - b1), c2 = T(1.0 - b2), km = T(k_m), kg = T(k_g), kv = T(k_v), a = T(lr),
            ep = T(eps), d = T(wd);
    for_range(n, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T x = p[i];
        if (wd != 0.0) x -= x * d;
        const T gi = gp[i];
        const T mi = mp[i] + (gi - mp[i]) * c1;
        const T vi = vp[i] + (gi * gi - vp[i]) * c2;
        mp[i] = mi;
        vp[i] = vi;
        const T m_hat = km * mi + kg * gi;
        const T v_hat = vi * kv;
        p[i] = x - (m_hat * a) / (std::sqrt(v_hat) + ep);
      }
    });
  });
  mark_written(var);
}

void rmsprop_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& at) {
  if (!can_fuse(in)) return rmsprop_update_composite(in, out, at);
  const double lr = at.f("lr"), wd = at.f("decay"), rho = at.f("rho"), eps = at.f("epsilon"),
               mu = at.f("momentum");
  const bool centered = at.b("centered");
  const Tensor &var = in[0], &g = in[1], &v = in[2];
  const Tensor* avg = centered ? &in[3] : nullptr;
  const Tensor* mom = mu > 0.0 ? &in[centered ? 4 : 3] : nullptr;
  const std::int64_t n = var.numel();
  with_float(var.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = var.data<T>();
    const T* gp = g.data<T>();
    T* vp = v.data<T>();
    T* ap = avg ? avg->data<T>() : nullptr;
    T* kp = mom ? mom->data<T>() : nullptr;
    const T r = T(rho), rc = T(1.0 - rho), a = T(lr), ep = T(eps), k = T(mu), d = T(wd);
    for_range(n, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T x = p[i];
        if (wd != 0.0) x -= x * d;
        const T gi = gp[i];
        const T vi = r * vp[i] + rc * (gi * gi);
        vp[i] = vi;
        T denom;
        if (ap) {
          const T ai = r * ap[i] + rc * gi;
          ap[i] = ai;
          denom = vi - ai * ai + ep;
        } else {
          denom = vi + ep;
        }
        const T inc = (a * gi) / std::sqrt(denom);
        if (kp) {
          const T ki = k * kp[i] + inc;
          kp[i] = ki;
          p[i] = x - ki;
        } else {
          p[i] = x - inc;
        }
      }
    });
  });
  mark_written(var);
}

void adagrad_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& at) {
  if (!can_fuse(in)) return adagrad_update_composite(in, out, at);
  const double lr = at.f("lr"), wd = at.f("decay"), eps = at.f("epsilon");
  const Tensor &var = in[0], &g = in[1], &acc = in[2];
  const std::int64_t n = var.numel();
  with_float(var.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = var.data<T>();
    const T* gp = g.data<T>();
    T* cp = acc.data<T>();
    const T a = T(lr), ep = T(eps), d = T(wd);
    for_range(n, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T x = p[i];
        if (wd != 0.0) x -= x * d;
        const T gi = gp[i];
        const T ci = cp[i] + gi * gi;
        cp[i] = ci;
        p[i] = x - (a * gi) / std::sqrt(ci + ep);
      }
    });
  });
  mark_written(var);
}

}  // namespace

void register_cpu_optim_update_kernels() {
  register_kernel("sgd_update", DeviceKind::CPU, sgd_update_kernel);
  register_kernel("adam_update", DeviceKind::CPU, adam_update_kernel);
  register_kernel("nadam_update", DeviceKind::CPU, nadam_update_kernel);
  register_kernel("rmsprop_update", DeviceKind::CPU, rmsprop_update_kernel);
  register_kernel("adagrad_update", DeviceKind::CPU, adagrad_update_kernel);
}
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The kernels of the active instruction set (src/internal/cpu_isa.hpp).
void register_cpu_optim_update_kernels() { SOMA_ISA_SELECT(register_cpu_optim_update_kernels)(); }
#endif

}  // namespace soma::detail
