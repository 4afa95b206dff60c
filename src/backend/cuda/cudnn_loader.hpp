#pragma once
// cuDNN 9 (its legacy "classic" API for convolutions, the backend graph API for fused
// attention, attention_cudnn.cpp), loaded on first use with dlopen("libcudnn.so.9"), as
// cuBLAS is (cublas_loader.hpp): linking it would make every process that links libsoma map the
// library (and the ~1 GB of engine libraries it opens) at start-up, GPU or not. The header
// cudnn.h is needed at build time only (cmake/SomaCuda.cmake: SOMA_HAS_CUDNN_HEADERS).
#include <cstddef>
#include <string>

#if SOMA_HAS_CUDNN_HEADERS
#include <cudnn.h>
#endif

namespace soma::cuda_detail {

// The loaded library's version (cudnnGetVersion(), e.g. 91900 for 9.19.0); 0 when it cannot be
// loaded or soma was built without cuDNN's headers (then cudnn_unavailable_reason() says why).
// Loads the library on the first call: for `soma info`.
std::size_t cudnn_version();
std::string cudnn_unavailable_reason();

#if SOMA_HAS_CUDNN_HEADERS
// The entry points soma uses, typed from cudnn.h's declarations.
#define SOMA_CUDNN_FUNCTIONS(X)                                                                \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream)                   \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensor4dDescriptor) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor) \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor)                       \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                              \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolution2dForwardOutputDim)                \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize)         \
  X(cudnnConvolutionForward) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                    \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)              \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                             \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter)         \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute) \
  X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)   \
  X(cudnnSetTensorNdDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnSetConvolutionNdDescriptor)

struct CudnnApi {
#define SOMA_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  SOMA_CUDNN_FUNCTIONS(SOMA_CUDNN_MEMBER)
#undef SOMA_CUDNN_MEMBER
};

// The loaded library's entry points; throws soma::Error naming `op` and why (dlopen/dlsym's
// message, or a major version other than the headers') when cuDNN cannot be used.
const CudnnApi& cudnn_api(const char* op);
#endif

}  // namespace soma::cuda_detail
