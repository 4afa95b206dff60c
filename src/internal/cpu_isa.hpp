#pragma once
// Internal: which instruction set the CPU kernels run with (runtime ISA dispatch, issue 27).
// The kernel files with hot loops are compiled once per target (src/backend/cpu/isa_foreach.hpp)
// and the path is chosen once at start-up from what the CPU supports (__builtin_cpu_supports),
// lowered by the environment variable SOMA_ISA=baseline|avx|avx2|avx512.
#include <atomic>
#include <string_view>

#include "soma/cpu_isa.hpp"

// Whether this build compiles the kernel files once per target. Only GCC on x86-64 (its
// `#pragma GCC target`), and only when the compilation's own flags have no AVX: a build with
// -march=native (SOMA_NATIVE=ON) compiles one pass for the build machine. clang (the sanitizer
// and fuzz builds) compiles the baseline pass only: its `#pragma clang attribute` for target()
// would work, but those builds test correctness, not speed, and one pass keeps them fast.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX__)
#define SOMA_ISA_MULTI 1
#else
#define SOMA_ISA_MULTI 0
#endif

namespace soma::detail {

// The targets, each including the ones before it:
//   baseline  what the library is compiled for (x86-64-v2 in the portable build: SSE4.2, POPCNT)
//   avx       + AVX, FMA, F16C (a CPU or VM with AVX but no AVX2)
//   avx2      x86-64-v3: + AVX2, BMI1/2, LZCNT, MOVBE
//   avx512    x86-64-v4: + AVX-512 F/BW/CD/DQ/VL
enum class Isa : int { baseline = 0, avx = 1, avx2 = 2, avx512 = 3 };
inline constexpr int kIsaCount = 4;

const char* isa_name(Isa isa);
// The target named `name` (one of the names above); anything else throws soma::Error naming
// SOMA_ISA and the accepted values.
Isa parse_isa(std::string_view name);

// The best target this CPU runs (and its OS enables).
Isa cpu_best_isa();
// Whether the CPU has AVX512-BF16 (reported by `soma info`; no kernel uses it yet).
bool cpu_has_avx512bf16();
// The targets compiled into this build: all four (SOMA_ISA_MULTI), else one: the level of the
// compiler's flags (-march=native) or baseline. compiled_isa_min()..compiled_isa_max().
Isa compiled_isa_min();
Isa compiled_isa_max();

// The target the kernels run with: the best one the CPU has that is compiled, lowered by
// SOMA_ISA (never raised above the CPU's; an unknown value throws soma::Error). Read once.
Isa init_active_isa();
extern std::atomic<int> g_active_isa;  // -1 until the first active_isa()
inline Isa active_isa() {
  const int v = g_active_isa.load(std::memory_order_relaxed);
  return v >= 0 ? Isa(v) : init_active_isa();
}
// Tests: run the kernels with `isa`, clamped to what the CPU has and what is compiled; returns
// the one set (select_cpu_isa also re-registers the kernels).
Isa set_active_isa(Isa isa);

// Tests: runs the CPU kernels with `isa` from now on (set_active_isa, then the dispatched files
// register their kernels again); returns the target set. Defined in src/ops/registry.cpp.
Isa select_cpu_isa(Isa isa);

// The function of the active target among one per target (the passes of isa_foreach.hpp).
template <class F>
inline F isa_select(F baseline, F avx, F avx2, F avx512) {
  switch (active_isa()) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    case Isa::avx: return avx;
    case Isa::baseline: break;
  }
  return baseline;
}

}  // namespace soma::detail
