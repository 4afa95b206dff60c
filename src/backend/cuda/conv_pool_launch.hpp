#pragma once
// Internal: launchers of conv_pool.cu (pooling, and the small kernels around cuDNN's
// convolutions), for the host side in conv.cpp. Plain structs only (launch.hpp's convention);
// the per-element logic is conv_pool_index.hpp's. Every launcher queues work on `stream` and
// returns the launch status; all buffers are packed NCHW.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/conv_pool_index.hpp"
#include "backend/cuda/launch.hpp"

namespace soma::cuda_detail {

enum class PoolKind : int {
  max,            // a = x                  -> out pooled
  max_grad,       // a = x, b = g (pooled)  -> out shaped like x
  max_grad_grad,  // a = x, b = h (like x)  -> out pooled
  avg,            // a = x                  -> out pooled
  avg_grad,       // a = g (pooled)         -> out shaped like the input
};

// Floating types (f32, f64, f16, bf16); f16/bf16 compute in f32.
cudaError_t launch_pool(PoolKind kind, const void* a, const void* b, void* out, ElemType type,
                        const PoolDims& dims, cudaStream_t stream);
// out [planes, oh, ow] = each window's argmax offset within its plane of x (i64).
cudaError_t launch_pool_argmax(const void* x, std::int64_t* out, ElemType type,
                               const PoolDims& dims, cudaStream_t stream);
// out = the window copy of `in` (elements of elem_bytes = 2, 4 or 8 bytes).
cudaError_t launch_window_copy(const void* in, void* out, int elem_bytes, const WindowCopy& copy,
                               cudaStream_t stream);
// y [N, channels, H, W] (numel elements, hw = H*W) in place: y + b[channel] (b may be null),
// then ReLU when `relu`.
cudaError_t launch_bias_act(void* y, const void* b, ElemType type, std::int64_t numel,
                            std::int64_t channels, std::int64_t hw, bool relu,
                            cudaStream_t stream);

// Registers the CUDA kernels of the convolution and pooling ops (conv.cpp); called by
// register_cuda_kernels() (ops.cpp).
void register_cuda_conv_kernels();

}  // namespace soma::cuda_detail
