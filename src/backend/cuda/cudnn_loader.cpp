#include "backend/cuda/cudnn_loader.hpp"

#include "backend/cuda/dl_library.hpp"

#include <mutex>
#include <string>

#include "soma/error.hpp"

namespace soma::cuda_detail {

#if SOMA_HAS_CUDNN_HEADERS
namespace {

CudnnApi g_api{};
std::string g_error;
bool g_loaded = false;

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  return bind_symbol(lib, name, fn, g_error);
}

void load() {
  // The soname of the major version soma was compiled against, then the path CMake found.
  std::string tried;
  void* lib = open_first({SOMA_CUDNN_SONAME, SOMA_CUDNN_PATH}, tried);
  if (!lib) {
    g_error = "cannot load cuDNN (convolutions on CUDA need libcudnn.so." +
              std::to_string(CUDNN_MAJOR) + "): " + tried;
    return;
  }
#define SOMA_CUDNN_BIND(name) &&bind(lib, #name, g_api.name)
  if (!(true SOMA_CUDNN_FUNCTIONS(SOMA_CUDNN_BIND))) return;
#undef SOMA_CUDNN_BIND
  // The legacy API's structs and enums are those of the headers' major version.
  const std::size_t v = g_api.cudnnGetVersion();
  if (v / 10000 != CUDNN_MAJOR) {
    g_error = "the loaded cuDNN is version " + std::to_string(v) + ", soma was built against " +
              std::to_string(CUDNN_VERSION) + " (major versions differ)";
    return;
  }
  g_loaded = true;
}

void load_once() {
  static std::once_flag once;
  std::call_once(once, load);
}

}  // namespace

const CudnnApi& cudnn_api(const char* op) {
  load_once();
  if (!g_loaded) fail(op, g_error);
  return g_api;
}

std::size_t cudnn_version() {
  load_once();
  return g_loaded ? g_api.cudnnGetVersion() : 0;
}

std::string cudnn_unavailable_reason() {
  load_once();
  return g_loaded ? std::string() : g_error;
}

#else
std::size_t cudnn_version() { return 0; }
std::string cudnn_unavailable_reason() {
  return "soma was built without cuDNN's headers (cudnn.h was not found at configure time)";
}
#endif

}  // namespace soma::cuda_detail
