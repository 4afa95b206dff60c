#pragma once
// cuBLAS, loaded on first use. Linking libcublas (and the ~500 MB libcublasLt behind it) would
// make every process that links libsoma pay about 100 ms at start-up to map them, GPU or not;
// soma opens them with dlopen the first time a matmul runs on a CUDA device instead.
#include <cublas_v2.h>

namespace soma::cuda_detail {

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  const char* (*status_name)(cublasStatus_t);
  const char* (*status_string)(cublasStatus_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t,
                                            cublasGemmAlgo_t);
};

// The loaded library's entry points; throws soma::Error naming `op` and what dlopen/dlsym said
// when libcublas cannot be loaded.
const CublasApi& cublas_api(const char* op);
// True once cublas_api() succeeded (status names are only available then).
bool cublas_loaded();

}  // namespace soma::cuda_detail
