// Compiles a kernel file once per instruction-set target (runtime ISA dispatch, issue 27;
// src/internal/cpu_isa.hpp chooses the target). No include guard: it is entered once per file.
//
// Use, in a kernel file (see elementwise.cpp):
//   #include <every header the file needs>           // ALL of them, before this one
//   #define SOMA_ISA_FILE "backend/cpu/this_file.cpp"
//   #include "backend/cpu/isa_foreach.hpp"           // includes this file again per target
//   namespace soma::detail {
//   SOMA_ISA_BEGIN                                    // namespace isa_<target> { under its pragma
//   ... the kernels, unchanged; `#if SOMA_ISA_AVX512` / SOMA_ISA_AVX2 / SOMA_ISA_AVX for
//       hand-written intrinsics ...
//   SOMA_ISA_END
//   #if SOMA_ISA_ONCE                                 // once per file, not per target:
//   void exported(...) { SOMA_ISA_SELECT(exported)(...); }   // the active target's function
//   #endif
//   }  // namespace soma::detail
//
// How: the first inclusion defines the macros of a target and includes the kernel file again
// (whose own inclusion of this header then does nothing), once for avx, avx2 and avx512; the
// rest of the top-level file is the baseline pass and the SOMA_ISA_ONCE code. Each pass is its
// own namespace (soma::detail::isa_avx2, ...) under `#pragma GCC target(...)`, so GCC generates
// and vectorises it for that target; the dispatch picks one namespace's functions.
//
// Why pragmas and not one object file per target built with -mavx2 etc.: an inline or template
// function from a shared header (std::vector, Tensor, parallel_for) that such an object file
// instantiates out of line is a weak symbol, and the linker may keep the -mavx512f copy for the
// whole program: SIGILL on an AVX2 machine. Under the pragma, a function whose definition was
// read before the pragma keeps the baseline options even when instantiated inside the pass:
// checked with GCC 12 (objdump of a noinline header template called inside a
// target("avx2") region: its weak copy has no ymm register; an inlinable one is inlined into
// the pass and vectorised with ymm; a pass lambda handed to a header template stays AVX2 code,
// called from the baseline template). Hence the rule: include every header before this one
// (Highway's foreach_target has the same rule).
//
// Two consequences seen in GCC 12: (1) a header template that calls a pass's function (a table
// functor instantiated for fused_block's Vec) cannot inline it, being baseline code: the pass's
// loop is marked [[gnu::flatten]] so that everything is inlined into it (pass options); a lambda
// handed to parallel_for / for_each_row is called per chunk / row instead of inlined. (2) An
// implicitly defined constructor is compiled outside the pragma: write it out when it uses
// intrinsics (nn.cpp's Pool2x2Avx512).
//
// GCC's C++ front end does NOT define __AVX2__, __AVX512F__, ... under `#pragma GCC target` (it
// reads the whole file before it sees the pragma; C does): code specific to a target tests
// SOMA_ISA_AVX512 / SOMA_ISA_AVX2 / SOMA_ISA_AVX (each 0 or 1, the pass's level or better).
//
// Builds with one pass (SOMA_ISA_MULTI 0: -march=native, clang, not x86-64): the file compiles
// once in namespace isa_native, SOMA_ISA_AVX* follow the compiler's own flags and SOMA_ISA_SELECT
// names that one function.
#ifndef SOMA_ISA_FOREACH_ACTIVE
#define SOMA_ISA_FOREACH_ACTIVE 1

#ifndef SOMA_ISA_FILE
#error "define SOMA_ISA_FILE (this file's path under src/) before including isa_foreach.hpp"
#endif

#include "internal/cpu_isa.hpp"

#if SOMA_ISA_MULTI
#define SOMA_ISA_ONCE 0
#define SOMA_ISA_END \
  }                  \
  _Pragma("GCC pop_options")

// avx: AVX, FMA, F16C on top of the baseline
#define SOMA_ISA_AVX 1
#define SOMA_ISA_AVX2 0
#define SOMA_ISA_AVX512 0
#define SOMA_ISA_BEGIN                                                       \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx,fma,f16c,popcnt\")") \
  namespace isa_avx {
#include SOMA_ISA_FILE
#undef SOMA_ISA_BEGIN
#undef SOMA_ISA_AVX2
#undef SOMA_ISA_AVX512

// avx2: x86-64-v3
#define SOMA_ISA_AVX2 1
#define SOMA_ISA_AVX512 0
#define SOMA_ISA_BEGIN                                                         \
  _Pragma("GCC push_options") _Pragma("GCC target(\"arch=x86-64-v3\")") \
  namespace isa_avx2 {
#include SOMA_ISA_FILE
#undef SOMA_ISA_BEGIN
#undef SOMA_ISA_AVX512

// avx512: x86-64-v4
#define SOMA_ISA_AVX512 1
#define SOMA_ISA_BEGIN                                                         \
  _Pragma("GCC push_options") _Pragma("GCC target(\"arch=x86-64-v4\")") \
  namespace isa_avx512 {
#include SOMA_ISA_FILE
#undef SOMA_ISA_BEGIN
#undef SOMA_ISA_AVX
#undef SOMA_ISA_AVX2
#undef SOMA_ISA_AVX512
#undef SOMA_ISA_END
#undef SOMA_ISA_ONCE

// baseline: the rest of the top-level file, with the code that exists once
#define SOMA_ISA_ONCE 1
#define SOMA_ISA_AVX 0
#define SOMA_ISA_AVX2 0
#define SOMA_ISA_AVX512 0
#define SOMA_ISA_BEGIN namespace isa_baseline {
#define SOMA_ISA_END }
#define SOMA_ISA_SELECT(...)                                                          \
  ::soma::detail::isa_select(&isa_baseline::__VA_ARGS__, &isa_avx::__VA_ARGS__, \
                             &isa_avx2::__VA_ARGS__, &isa_avx512::__VA_ARGS__)

#else  // one pass

#define SOMA_ISA_ONCE 1
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define SOMA_ISA_AVX512 1
#else
#define SOMA_ISA_AVX512 0
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define SOMA_ISA_AVX2 1
#else
#define SOMA_ISA_AVX2 0
#endif
#if defined(__AVX__)
#define SOMA_ISA_AVX 1
#else
#define SOMA_ISA_AVX 0
#endif
#define SOMA_ISA_BEGIN namespace isa_native {
#define SOMA_ISA_END }
#define SOMA_ISA_SELECT(...) (&isa_native::__VA_ARGS__)

#endif  // SOMA_ISA_MULTI
#endif  // SOMA_ISA_FOREACH_ACTIVE
