// The thread's autocast dtype (include/soma/autocast.hpp). The CPU kernels read it through
// detail::cpu_autocast_dtype() (src/backend/cpu/onednn_matmul.cpp), which also knows whether the
// machine can honour it.
#include "soma/autocast.hpp"

#include <algorithm>
#include <cctype>

#include "soma/error.hpp"

namespace soma {
namespace {
thread_local DType tl_autocast = DType::f32;
}

DType autocast_dtype() { return tl_autocast; }

AutocastScope::AutocastScope(DType dtype) : saved_(tl_autocast) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    fail("AutocastScope", "dtype ", dtype_name(dtype),
         " is not an autocast dtype (use bf16, f16, or f32 to switch autocast off)");
  tl_autocast = dtype;
}

AutocastScope::~AutocastScope() { tl_autocast = saved_; }

DType parse_autocast_dtype(const std::string& name, const char* who) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s.empty() || s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  fail(who, "unknown precision '", name, "' (expected f32, bf16 or f16)");
}

}  // namespace soma
