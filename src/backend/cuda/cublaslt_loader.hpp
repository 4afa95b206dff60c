#pragma once
// cuBLASLt, loaded on first use with dlopen like cuBLAS (cublas_loader.hpp): linking it would map
// its ~500 MB into every process that links libsoma, GPU or not. Used by dense_bias_act's CUDA
// kernel (dense.cpp) for the GEMM with the bias / ReLU epilogue.
#include <cublasLt.h>

namespace soma::cuda_detail {

struct CublasLtApi {
  cublasStatus_t (*create)(cublasLtHandle_t*);
  const char* (*status_name)(cublasStatus_t);
  const char* (*status_string)(cublasStatus_t);
  cublasStatus_t (*matmul_desc_create)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*matmul_desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*matmul_desc_set_attribute)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                              const void*, size_t);
  cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t,
                                  int64_t);
  cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*preference_create)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*preference_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*preference_set_attribute)(cublasLtMatmulPreference_t,
                                             cublasLtMatmulPreferenceAttributes_t, const void*,
                                             size_t);
  cublasStatus_t (*algo_get_heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                       cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                       cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                       cublasLtMatmulPreference_t, int,
                                       cublasLtMatmulHeuristicResult_t[], int*);
  cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,
                           cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t,
                           const void*, const void*, cublasLtMatrixLayout_t, void*,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t,
                           cudaStream_t);
};

// The loaded library's entry points; throws soma::Error naming `op` and what dlopen/dlsym said
// when libcublasLt cannot be loaded.
const CublasLtApi& cublaslt_api(const char* op);

// Throws soma::Error "<op>: <what> failed on cuda:<device>: <status name> (<message>)" unless
// `status` is CUBLAS_STATUS_SUCCESS.
void check_cublaslt(cublasStatus_t status, const char* op, const char* what, int device);

}  // namespace soma::cuda_detail
