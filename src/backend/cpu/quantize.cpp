// CPU kernels of quantize_linear and dequantize_linear (src/ops/quantize.cpp): the per-element
// formulas of src/ops/quantize_formulas.hpp over packed operands.
#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "ops/quantize_formulas.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_into(t, p);
  return p;
}

quant::ChannelIndex channel_index(const Tensor& x, const Tensor& scale, const Attrs& a) {
  if (scale.numel() == 1) return {};
  const int ax = normalize_axis(a.i("axis"), x.rank(), "quantize");
  return quant::ChannelIndex::make(x.shape().data(), int(x.rank()), ax, scale.numel());
}

void quantize_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor x = packed(in[0]), s = packed(in[1]), z = packed(in[2]);
  const quant::ChannelIndex ch = channel_index(x, s, a);
  dispatch_floating(x.dtype(), "quantize_linear", [&]<class T>() {
    using C = compute_t<T>;
    const T* px = x.data<T>();
    const T* ps = s.data<T>();
    auto run = [&]<class Q>() {
      const Q* pz = z.data<Q>();
      Q* po = out[0].data<Q>();
      parallel_for(x.numel(), kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t c = ch(i);
          // The quotient in x's own type (f16 rounds it), as ONNX's NumPy reference.
          const C q = C(T(C(px[i]) / C(ps[c])));
          po[i] = quant::quantize_value<Q>(q, std::int32_t(pz[c]));
        }
      });
    };
    if (z.dtype() == DType::u8) run.template operator()<std::uint8_t>();
    else run.template operator()<std::int8_t>();
  });
}

void dequantize_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor x = packed(in[0]), s = packed(in[1]), z = packed(in[2]);
  const quant::ChannelIndex ch = channel_index(x, s, a);
  dispatch_floating(s.dtype(), "dequantize_linear", [&]<class T>() {
    using C = compute_t<T>;
    const T* ps = s.data<T>();
    T* po = out[0].data<T>();
    auto run = [&]<class I>() {
      const I* px = x.data<I>();
      const I* pz = z.data<I>();
      parallel_for(x.numel(), kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t c = ch(i);
          po[i] = convert<T>(quant::dequantize_value<C>(px[i], pz[c], C(ps[c])));
        }
      });
    };
    switch (x.dtype()) {
      case DType::u8: run.template operator()<std::uint8_t>(); break;
      case DType::i8: run.template operator()<std::int8_t>(); break;
      default: run.template operator()<std::int32_t>(); break;
    }
  });
}

}  // namespace

void register_cpu_quantize_kernels() {
  register_kernel("quantize_linear", DeviceKind::CPU, quantize_kernel);
  register_kernel("dequantize_linear", DeviceKind::CPU, dequantize_kernel);
}

}  // namespace soma::detail
