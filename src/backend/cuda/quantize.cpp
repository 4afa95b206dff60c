// CUDA kernels of quantize_linear and dequantize_linear (src/ops/quantize.cpp): packed operands,
// one launch of quantize_kernels.cu each.
#include "backend/cuda/host_util.hpp"
#include "backend/cuda/quantize_launch.hpp"
#include "soma/op.hpp"

namespace soma::cuda_detail {
namespace {

quant::ChannelIndex channel_index(const Tensor& x, const Tensor& scale, const Attrs& a,
                                  const char* op) {
  if (scale.numel() == 1) return {};
  const int ax = normalize_axis(a.i("axis"), x.rank(), op);
  return quant::ChannelIndex::make(x.shape().data(), int(x.rank()), ax, scale.numel());
}

void quantize_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = "quantize_linear";
  const Tensor x = packed(in[0]), s = packed(in[1]), z = packed(in[2]);
  const int d = device_of(x, op);
  launched(launch_quantize(first_element(x), first_element(s), first_element(z),
                           first_element(out[0]), elem(x.dtype()), elem(z.dtype()),
                           channel_index(x, s, a, op), x.numel(), stream(d)),
           op, d);
}

void dequantize_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = "dequantize_linear";
  const Tensor x = packed(in[0]), s = packed(in[1]), z = packed(in[2]);
  const int d = device_of(x, op);
  launched(launch_dequantize(first_element(x), first_element(s), first_element(z),
                             first_element(out[0]), elem(x.dtype()), elem(s.dtype()),
                             channel_index(x, s, a, op), x.numel(), stream(d)),
           op, d);
}

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::detail {
void register_cuda_quantize_kernels() {
  register_kernel("quantize_linear", DeviceKind::CUDA, cuda_detail::quantize_kernel);
  register_kernel("dequantize_linear", DeviceKind::CUDA, cuda_detail::dequantize_kernel);
}
}  // namespace soma::detail
