#include "backend/cuda/cublaslt_loader.hpp"

#include "backend/cuda/dl_library.hpp"

#include <mutex>
#include <string>

#include "soma/error.hpp"

// CMake defines both (cmake/SomaCuda.cmake); the defaults keep the file compilable on its own.
#ifndef SOMA_CUBLASLT_SONAME
#define SOMA_CUBLASLT_SONAME "libcublasLt.so.13"
#endif
#ifndef SOMA_CUBLASLT_PATH
#define SOMA_CUBLASLT_PATH "/usr/local/cuda/lib64/libcublasLt.so.13"
#endif

namespace soma::cuda_detail {
namespace {

CublasLtApi g_api{};
std::string g_error;
bool g_loaded = false;

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  return bind_symbol(lib, name, fn, g_error);
}

void load() {
  // The soname of the toolkit soma was built with first, then the path CMake found it at.
  std::string tried;
  void* lib = open_first({SOMA_CUBLASLT_SONAME, SOMA_CUBLASLT_PATH, "libcublasLt.so"}, tried);
  if (!lib) {
    g_error = "cannot load cuBLASLt: " + tried;
    return;
  }
  if (bind(lib, "cublasLtCreate", g_api.create) &&
      bind(lib, "cublasLtGetStatusName", g_api.status_name) &&
      bind(lib, "cublasLtGetStatusString", g_api.status_string) &&
      bind(lib, "cublasLtMatmulDescCreate", g_api.matmul_desc_create) &&
      bind(lib, "cublasLtMatmulDescDestroy", g_api.matmul_desc_destroy) &&
      bind(lib, "cublasLtMatmulDescSetAttribute", g_api.matmul_desc_set_attribute) &&
      bind(lib, "cublasLtMatrixLayoutCreate", g_api.layout_create) &&
      bind(lib, "cublasLtMatrixLayoutDestroy", g_api.layout_destroy) &&
      bind(lib, "cublasLtMatmulPreferenceCreate", g_api.preference_create) &&
      bind(lib, "cublasLtMatmulPreferenceDestroy", g_api.preference_destroy) &&
      bind(lib, "cublasLtMatmulPreferenceSetAttribute", g_api.preference_set_attribute) &&
      bind(lib, "cublasLtMatmulAlgoGetHeuristic", g_api.algo_get_heuristic) &&
      bind(lib, "cublasLtMatmul", g_api.matmul))
    g_loaded = true;
}

}  // namespace

const CublasLtApi& cublaslt_api(const char* op) {
  static std::once_flag once;
  std::call_once(once, load);
  if (!g_loaded) fail(op, g_error);
  return g_api;
}

void check_cublaslt(cublasStatus_t status, const char* op, const char* what, int device) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (!g_loaded) fail(op, what, " failed on cuda:", device, ": cuBLASLt status ", int(status));
  fail(op, what, " failed on cuda:", device, ": ", g_api.status_name(status), " (",
       g_api.status_string(status), ")");
}

}  // namespace soma::cuda_detail
