#include "backend/cuda/cublas_loader.hpp"

#include "backend/cuda/dl_library.hpp"

#include <mutex>
#include <string>

#include "soma/error.hpp"

namespace soma::cuda_detail {
namespace {

CublasApi g_api{};
std::string g_error;
bool g_loaded = false;

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  return bind_symbol(lib, name, fn, g_error);
}

void load() {
  // The soname the toolkit soma was built with first, then the path CMake found it at.
  std::string tried;
  void* lib = open_first({SOMA_CUBLAS_SONAME, SOMA_CUBLAS_PATH, "libcublas.so"}, tried);
  if (!lib) {
    g_error = "cannot load cuBLAS: " + tried;
    return;
  }
  if (bind(lib, "cublasCreate_v2", g_api.create) &&
      bind(lib, "cublasSetStream_v2", g_api.set_stream) &&
      bind(lib, "cublasGetStatusName", g_api.status_name) &&
      bind(lib, "cublasGetStatusString", g_api.status_string) &&
      bind(lib, "cublasGemmEx", g_api.gemm_ex) &&
      bind(lib, "cublasGemmStridedBatchedEx", g_api.gemm_strided_batched_ex))
    g_loaded = true;
}

}  // namespace

const CublasApi& cublas_api(const char* op) {
  static std::once_flag once;
  std::call_once(once, load);
  if (!g_loaded) fail(op, g_error);
  return g_api;
}

bool cublas_loaded() { return g_loaded; }

}  // namespace soma::cuda_detail
