#pragma once
// Internal: opening an NVIDIA library with dlopen on first use (cuBLAS, cuBLASLt, cuDNN: see
// cublas_loader.hpp for why soma does not link them) and binding its entry points.
#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace soma::cuda_detail {

// The first of `names` that dlopen opens (an empty name is skipped: dlopen("") would open the
// program itself), or null with `tried` holding what dlopen said for each.
inline void* open_first(std::initializer_list<const char*> names, std::string& tried) {
  for (const char* name : names) {
    if (!name || !*name) continue;
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (e ? e : name);
  }
  return nullptr;
}

// fn = the symbol `name` of `lib`; false (and `error` says why) when it is missing.
template <class F>
bool bind_symbol(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) {
    const char* e = dlerror();
    error = std::string("dlsym(") + name + ") failed: " + (e ? e : "not found");
  }
  return fn != nullptr;
}

}  // namespace soma::cuda_detail
