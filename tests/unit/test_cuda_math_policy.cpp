// The TF32 switch (issue 23), checked on the CPU in every build: which cuBLAS compute type and
// cuDNN math type soma asks for (src/backend/cuda/math_policy.hpp), and how SOMA_ALLOW_TF32 is
// read (src/core/tf32_env.hpp). The GPU side (the libraries honouring it) is test_cuda.cpp's
// Tf32AndFullF32MatchTheCpu and test_cuda_conv.cpp's Tf32IsCloseToTheCpu.
#include <gtest/gtest.h>

#include "../../src/backend/cuda/math_policy.hpp"
#include "../../src/core/tf32_env.hpp"
#include "soma/cuda.hpp"

using namespace soma;
using namespace soma::cuda_detail;

TEST(CudaMathPolicy, F32UsesTf32OnlyWhenAllowedAndFromAmpereOn) {
  // Volta (7.0) and Turing (7.5) have no TF32: full f32 is asked for even when allowed.
  EXPECT_EQ(gemm_compute(DType::f32, true, 7), GemmCompute::k32F);
  EXPECT_EQ(gemm_compute(DType::f32, true, 8), GemmCompute::k32FFastTF32);   // A100
  EXPECT_EQ(gemm_compute(DType::f32, true, 9), GemmCompute::k32FFastTF32);   // H100
  EXPECT_EQ(gemm_compute(DType::f32, true, 10), GemmCompute::k32FFastTF32);  // Blackwell
  EXPECT_EQ(gemm_compute(DType::f32, false, 9), GemmCompute::k32F);
  EXPECT_EQ(gemm_compute(DType::f32, true, 0), GemmCompute::k32F);  // capability unknown
  EXPECT_STREQ(gemm_compute_name(gemm_compute(DType::f32, true, 9)), "CUBLAS_COMPUTE_32F_FAST_TF32");
}

TEST(CudaMathPolicy, OtherDtypesIgnoreTheSwitch) {
  for (bool allow : {true, false})
    for (int major : {7, 8, 9}) {
      EXPECT_EQ(gemm_compute(DType::f64, allow, major), GemmCompute::k64F);
      // f16/bf16 products accumulate in f32 on tensor cores whatever the switch says.
      EXPECT_EQ(gemm_compute(DType::f16, allow, major), GemmCompute::k32F);
      EXPECT_EQ(gemm_compute(DType::bf16, allow, major), GemmCompute::k32F);
      EXPECT_EQ(conv_math(DType::f16, allow, major), ConvMath::kTensorOp);
      EXPECT_EQ(conv_math(DType::bf16, allow, major), ConvMath::kTensorOp);
      EXPECT_EQ(conv_math(DType::f64, allow, major), ConvMath::kDefault);
      EXPECT_FALSE(uses_tf32(DType::f64, allow, major));
      EXPECT_FALSE(uses_tf32(DType::bf16, allow, major));
    }
}

TEST(CudaMathPolicy, ConvolutionsForbidTensorCoresForF32WhenTf32IsOff) {
  // FMA math, not DEFAULT: cuDNN's default lets f32 use TF32 on Ampere and later.
  EXPECT_EQ(conv_math(DType::f32, false, 9), ConvMath::kFma);
  EXPECT_EQ(conv_math(DType::f32, true, 9), ConvMath::kTensorOp);
  EXPECT_EQ(conv_math(DType::f32, true, 7), ConvMath::kFma);
  EXPECT_STREQ(conv_math_name(conv_math(DType::f32, false, 8)), "CUDNN_FMA_MATH");
}

TEST(CudaMathPolicy, EnvironmentVariable) {
  EXPECT_TRUE(detail::allow_tf32_from_env(nullptr));  // unset: on (the default)
  EXPECT_TRUE(detail::allow_tf32_from_env(""));
  EXPECT_TRUE(detail::allow_tf32_from_env("1"));
  for (const char* off : {"0", "false", "off", "no", "OFF"})
    EXPECT_FALSE(detail::allow_tf32_from_env(off)) << off;
}

TEST(CudaMathPolicy, SwitchToggles) {
  const bool was = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
  EXPECT_FALSE(cuda::tf32_active(0));
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  // Active only with a device that has TF32.
  if (!cuda::is_available()) {
    EXPECT_FALSE(cuda::tf32_active(0));
  } else {
    EXPECT_EQ(cuda::tf32_active(0), cuda::device_properties(0).major >= 8);
  }
  EXPECT_FALSE(cuda::tf32_active(-1));
  cuda::set_allow_tf32(was);
}
