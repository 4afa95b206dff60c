// CPU kernel of dense_bias_act (src/ops/dense.cpp): y = act(x @ kernel + bias).
//
// Small f32 products (at most 8 rows and 2^20 multiply-adds: batch-1 and small-batch inference)
// run the fused GEMV (fast_paths.cpp) when nothing could tell it from the separate ops: fast
// paths on, no numerics check, no autocast, no tape recording. Everything else runs matmul's
// kernel (OpenBLAS / oneDNN under bf16 autocast), then one pass adds the bias and applies the
// activation, rounding as the separate add and relu ops do.
#include <algorithm>

#include "internal/dense_op.hpp"
#include "internal/dispatch.hpp"
#include "internal/fast_paths.hpp"
#include "internal/fused_dense.hpp"
#include "internal/parallel.hpp"
#include "internal/runtime_checks.hpp"
#include "internal/tensor_vector_pool.hpp"
#include "soma/autocast.hpp"
#include "soma/autograd.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::detail {

namespace {

bool cpu_f32_packed(const Tensor& t) { return t.dtype() == DType::f32 && t.is_contiguous(); }

// The fused GEMV's state rule (as for Dense's inference path before it was an op).
bool small_kernel_state_ok() {
  return fast_paths_enabled() && !check_numerics_on() && autocast_dtype() == DType::f32 &&
         (active_tapes().empty() || grad_recording_disabled());
}

// Rows [r0, r1) of y [rows, n]: y + bias, then ReLU, each rounded to T as the add and relu ops
// round (their arithmetic in compute_t<T>).
template <class T, bool kBias, bool kRelu>
void bias_act_rows(T* __restrict py, const T* __restrict pb, std::int64_t r0, std::int64_t r1,
                   std::int64_t n) {
  using C = compute_t<T>;
  for (std::int64_t r = r0; r < r1; ++r) {
    T* __restrict row = py + r * n;
    for (std::int64_t j = 0; j < n; ++j) {
      T v = row[j];
      if constexpr (kBias) v = T(C(v) + C(pb[j]));
      if constexpr (kRelu) v = C(v) <= C(0) ? T(C(0)) : v;  // NaN stays
      row[j] = v;
    }
  }
}

void dense_bias_act_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a) {
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  const Tensor* b = in.size() == 3 ? &in[2] : nullptr;
  const bool relu = dense_relu(a);
  if (y.numel() == 0) return;
  const std::int64_t k = w.shape()[0], n = w.shape()[1];
  const std::int64_t m = k > 0 ? x.numel() / k : 0;
  if (k > 0 && fused_dense_fits(m, k, n) && cpu_f32_packed(x) && cpu_f32_packed(w) &&
      (!b || cpu_f32_packed(*b)) && cpu_f32_packed(y) && small_kernel_state_ok()) {
    fused_dense_f32(x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr,
                    y.data<float>(), m, k, n, relu);
    return;
  }
  static const KernelFn matmul_kernel = get_op("matmul").kernels[int(DeviceKind::CPU)];
  if (b) {
    std::vector<Tensor> xw = take_tensor_vector();
    xw.push_back(x);
    xw.push_back(w);
    matmul_kernel(xw, out, {});
    give_back_tensor_vector(std::move(xw));
  } else {
    matmul_kernel(in, out, {});
  }
  if (!b && !relu) return;
  // The op's fresh output is contiguous: rows of n.
  const Tensor bias = b && !b->is_contiguous() ? contiguous(*b) : b ? *b : Tensor();
  const std::int64_t rows = y.numel() / n;
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(n, 1));
  dispatch_floating(y.dtype(), "dense_bias_act", [&]<class T>() {
    T* py = y.data<T>();
    const T* pb = b ? bias.data<T>() : nullptr;
    parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
      if (pb && relu) bias_act_rows<T, true, true>(py, pb, r0, r1, n);
      else if (pb) bias_act_rows<T, true, false>(py, pb, r0, r1, n);
      else bias_act_rows<T, false, true>(py, pb, r0, r1, n);
    });
  });
}

}  // namespace

void register_cpu_dense_kernel() {
  register_kernel("dense_bias_act", DeviceKind::CPU, dense_bias_act_kernel);
}

}  // namespace soma::detail
