#pragma once
// Internal (host side of the CUDA backend): devices, per-device streams and cuBLAS handles, and
// the translation of CUDA/cuBLAS status codes into soma::Error naming the op.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "soma/device.hpp"
#include "soma/dtype.hpp"

namespace soma::cuda_detail {

// Throws soma::Error "<op>: <what> failed on cuda:<device>: <cudaError name> (<message>)".
void check(cudaError_t status, const char* op, const char* what, int device);
void check_cublas(cublasStatus_t status, const char* op, const char* what, int device);

// Makes `device` current for this thread and returns it; throws soma::Error with the reason
// when CUDA or that device is unusable.
int use_device(int device, const char* op);
// soma's stream on a device (created on first use; non-blocking with respect to stream 0).
cudaStream_t stream(int device);
// The cuBLAS handle of a device, bound to its stream.
cublasHandle_t cublas(int device);
// The device's compute capability (major; read once; 0 when unknown). TF32 needs 8 or more
// (math_policy.hpp).
int compute_major(int device);
// The cuBLAS / cuBLASLt compute type of a GEMM with operands of dtype `t` on `device`
// (math_policy.hpp's gemm_compute with cuda::allow_tf32() and the device's capability).
cublasComputeType_t gemm_compute_type(DType t, int device);

}  // namespace soma::cuda_detail

namespace soma::cuda_detail {
// The caching device allocator (runtime.cpp): sizes are rounded up to a bucket; freed blocks wait
// in per-device free lists for the next request of their bucket. All work of a device runs on its
// one stream, so a block freed by the host may be handed out again at once: the next kernel that
// writes it is queued behind every kernel that read it.
void* allocate(std::size_t nbytes, int device);
void deallocate(void* p, std::size_t nbytes, int device) noexcept;
// Copies between packed buffers (see core/device_backend.hpp: copy_bytes).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes);
std::string reason();
// Pinned host memory (cached by size), the async host -> device copy on the device's stream and
// events (see core/device_backend.hpp).
void* allocate_pinned(std::size_t nbytes);
void free_pinned(void* p, std::size_t nbytes) noexcept;
void copy_to_device_async(void* dst, Device dst_device, const void* src, std::size_t nbytes);
void* create_event(int device);
void record_event(void* event, int device);
void wait_event(void* event, int device);
void destroy_event(void* event, int device) noexcept;
// CUDA graph capture on a device's stream, with a private memory pool per graph
// (core/device_backend.hpp: begin_capture ... destroy_graph).
void begin_capture(int device);
void* end_capture(int device, std::string* why);
void launch_graph(void* graph, int device);
void destroy_graph(void* graph, int device) noexcept;
// Whether a capture is under way on the device (kernels whose launch arguments change every call,
// the random ops' seeds, refuse to be captured).
bool capturing(int device);
}  // namespace soma::cuda_detail
