#pragma once
// Internal: the starting value of cuda::allow_tf32() from the environment, read by both the CUDA
// backend (src/backend/cuda/runtime.cpp) and the CPU-only build's stand-in
// (src/core/device_backend.cpp), so `SOMA_ALLOW_TF32=0` means the same in either.
#include <cstring>

namespace soma::detail {

// SOMA_ALLOW_TF32: unset or empty keeps TF32 on (the default, as PyTorch's cuDNN switch and
// TensorFlow); "0", "false", "off" or "no" turn it off; anything else leaves it on.
inline bool allow_tf32_from_env(const char* value) {
  if (!value) return true;
  for (const char* off : {"0", "false", "off", "no", "FALSE", "OFF", "NO", "False"})
    if (std::strcmp(value, off) == 0) return false;
  return true;
}

}  // namespace soma::detail
