#pragma once
// Autocast: mixed-precision matrix and convolution work (docs/performance.md, workload 8).
//
//   soma::AutocastScope guard(soma::DType::bf16);   // this thread, until guard goes away
//   auto y = soma::matmul(x, w);                     // f32 in, f32 out, bf16 products inside
//
// Inside a scope, the f32 kernels of matmul, conv2d, conv2d_backprop_input and
// conv2d_backprop_filter round their operands to the scope's dtype and accumulate in f32; their
// outputs stay f32. Nothing else changes: op definitions, output dtypes, gradients (the backward
// matmuls and convolutions are those same ops, so they run in the low dtype too), the tape,
// losses, optimisers and master weights are all f32 as before. f64 and integer ops are never
// touched. The flag is per thread and is read by the kernels when they run, so graph mode
// (Session::run, soma::function) follows the scope of the thread that runs the graph.
//
// CPU: bf16 runs through oneDNN (AVX-512-BF16 instructions) when soma is built with oneDNN and
// the CPU has them; otherwise the kernels stay in f32 and a one-time note goes to stderr
// (autocast_native(DType::bf16) tells which). f16 has no CPU kernels: accepted (the CUDA backend
// uses it), run in f32 on the CPU with the same one-time note.
#include "soma/dtype.hpp"

namespace soma {

// The dtype matrix work runs in on this thread: DType::f32 when no autocast scope is active.
DType autocast_dtype();

// Sets this thread's autocast dtype (bf16, f16, or f32 = off) until destroyed, then restores
// the previous one, so scopes nest. Any other dtype is an error.
class AutocastScope {
 public:
  explicit AutocastScope(DType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DType saved_;
};

// Parses "bf16", "f16" (also "fp16", "bfloat16", "float16") or "f32" / "" (off) into the dtype
// AutocastScope takes; anything else is an error naming `who`.
DType parse_autocast_dtype(const std::string& name, const char* who = "autocast");

// True when the CPU kernels really compute in `dtype` under autocast (f32 always; bf16 with
// oneDNN built in and AVX-512-BF16 or AMX on this CPU; f16 never).
bool autocast_native(DType dtype);

}  // namespace soma
