#pragma once
// Internal: the interface between the host side of quantize_linear / dequantize_linear on CUDA
// (quantize.cpp) and their kernels (quantize_kernels.cu). Plain arguments only (nvcc compiles
// no soma header): packed operands, the types as launch.hpp's ElemType.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/launch.hpp"
#include "ops/quantize_formulas.hpp"

namespace soma::cuda_detail {

// out[i] = quantize(x[i] / scale[ch(i)], zero_point[ch(i)]): x and scale of float type `x_type`,
// zero point and out of type `q_type` (u8 or i8).
cudaError_t launch_quantize(const void* x, const void* scale, const void* zero_point, void* out,
                            ElemType x_type, ElemType q_type, quant::ChannelIndex ch,
                            std::int64_t n, cudaStream_t stream);
// out[i] = (q[i] - zero_point[ch(i)]) * scale[ch(i)]: q and zero point of `q_type` (u8, i8,
// i32), scale and out of float type `f_type`.
cudaError_t launch_dequantize(const void* q, const void* scale, const void* zero_point, void* out,
                              ElemType q_type, ElemType f_type, quant::ChannelIndex ch,
                              std::int64_t n, cudaStream_t stream);

}  // namespace soma::cuda_detail
