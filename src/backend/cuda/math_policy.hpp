#pragma once
// Internal: which math the f32 GEMMs and convolutions ask the libraries for (TF32 or full f32),
// as plain values, so the choice is tested on the CPU (tests/unit/test_cuda_math_policy.cpp) and
// the .cpp files only translate it into cuBLAS / cuBLASLt / cuDNN enums.
//
// TF32 tensor cores exist from Ampere (compute capability 8.0) on. soma asks for them for f32
// when cuda::allow_tf32() (on by default; SOMA_ALLOW_TF32=0 or set_allow_tf32(false) turns it
// off) and the device has them; f16/bf16 always use tensor cores with f32 accumulation; f64 is
// f64. On an older device the full-f32 request is made explicitly rather than relying on the
// library to ignore a TF32 request.
#include "soma/dtype.hpp"

namespace soma::cuda_detail {

// The first compute capability (major) with TF32 tensor cores.
inline constexpr int kTf32MinMajor = 8;

constexpr bool device_has_tf32(int cc_major) { return cc_major >= kTf32MinMajor; }

// True when an f32 product of this dtype runs on TF32 tensor cores.
constexpr bool uses_tf32(DType t, bool allow, int cc_major) {
  return t == DType::f32 && allow && device_has_tf32(cc_major);
}

// cuBLAS / cuBLASLt compute types (cublasComputeType_t) soma uses.
enum class GemmCompute { k32F, k32FFastTF32, k64F };
constexpr GemmCompute gemm_compute(DType t, bool allow, int cc_major) {
  if (t == DType::f64) return GemmCompute::k64F;
  return uses_tf32(t, allow, cc_major) ? GemmCompute::k32FFastTF32 : GemmCompute::k32F;
}

// cuDNN math types (cudnnMathType_t) soma asks a convolution descriptor for. kFma forbids
// tensor cores (and so TF32); kTensorOp allows them (TF32 for f32 on Ampere and later).
enum class ConvMath { kDefault, kTensorOp, kFma };
constexpr ConvMath conv_math(DType t, bool allow, int cc_major) {
  if (t == DType::f16 || t == DType::bf16) return ConvMath::kTensorOp;
  if (t == DType::f32) return uses_tf32(t, allow, cc_major) ? ConvMath::kTensorOp : ConvMath::kFma;
  return ConvMath::kDefault;
}

constexpr const char* gemm_compute_name(GemmCompute c) {
  switch (c) {
    case GemmCompute::k32F: return "CUBLAS_COMPUTE_32F";
    case GemmCompute::k32FFastTF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case GemmCompute::k64F: return "CUBLAS_COMPUTE_64F";
  }
  return "?";
}
constexpr const char* conv_math_name(ConvMath m) {
  switch (m) {
    case ConvMath::kDefault: return "CUDNN_DEFAULT_MATH";
    case ConvMath::kTensorOp: return "CUDNN_TENSOR_OP_MATH";
    case ConvMath::kFma: return "CUDNN_FMA_MATH";
  }
  return "?";
}

}  // namespace soma::cuda_detail
