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

namespace {
// Spellings of the autocast precisions (lower case; "" is f32: autocast off).
struct PrecisionName {
  const char* name;
  DType dtype;
};
const PrecisionName kPrecisionNames[] = {
    {"", DType::f32},       {"f32", DType::f32},     {"fp32", DType::f32},
    {"float32", DType::f32}, {"bf16", DType::bf16},   {"bfloat16", DType::bf16},
    {"f16", DType::f16},    {"fp16", DType::f16},    {"float16", DType::f16},
    {"half", DType::f16},
};
}  // namespace

DType parse_autocast_dtype(const std::string& name, const char* who) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const auto& p : kPrecisionNames)
    if (s == p.name) return p.dtype;
  fail(who, "unknown precision '", name, "' (expected f32, bf16 or f16)");
}

}  // namespace soma
