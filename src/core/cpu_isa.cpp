#include "internal/cpu_isa.hpp"

#include <cstdlib>
#include <mutex>

#include "soma/error.hpp"

namespace soma::detail {

namespace {
constexpr const char* kNames[kIsaCount] = {"baseline", "avx", "avx2", "avx512"};

// The level of the compiler's own flags (the one pass of a single-pass build).
constexpr Isa flags_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__)
  return Isa::avx512;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__)
  return Isa::avx2;
#elif defined(__AVX__) && defined(__FMA__) && defined(__F16C__)
  return Isa::avx;
#else
  return Isa::baseline;
#endif
}

std::string env_isa() {
  const char* e = std::getenv("SOMA_ISA");
  return e ? std::string(e) : std::string();
}
}  // namespace

std::atomic<int> g_active_isa{-1};

const char* isa_name(Isa isa) { return kNames[int(isa)]; }

Isa parse_isa(std::string_view name) {
  for (int i = 0; i < kIsaCount; ++i)
    if (name == kNames[i]) return Isa(i);
  fail("SOMA_ISA", "unknown instruction set '", std::string(name),
       "' (expected baseline, avx, avx2 or avx512)");
}

Isa cpu_best_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // libgcc's (and compiler-rt's) feature bits count AVX and AVX-512 only when the OS saves their
  // registers (XCR0), so these are what a program may run.
  const bool avx = __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma");
  const bool avx2 = avx && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#if !defined(__clang__)
  // clang 14 knows neither these names nor the x86-64-vN levels; every AVX2 CPU has them.
  const bool f16c = __builtin_cpu_supports("f16c");
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
#else
  const bool f16c = true, v3 = avx2;
#endif
  if (avx512 && v3) return Isa::avx512;
  if (avx2 && v3) return Isa::avx2;
  if (avx && f16c) return Isa::avx;
#endif
  return Isa::baseline;
}

bool cpu_has_avx512bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Isa compiled_isa_min() { return SOMA_ISA_MULTI ? Isa::baseline : flags_isa(); }
Isa compiled_isa_max() { return SOMA_ISA_MULTI ? Isa::avx512 : flags_isa(); }

namespace {
Isa clamp_isa(Isa want) {
  Isa isa = want;
  if (int(cpu_best_isa()) < int(isa)) isa = cpu_best_isa();
  if (int(compiled_isa_max()) < int(isa)) isa = compiled_isa_max();
  if (int(isa) < int(compiled_isa_min())) isa = compiled_isa_min();
  return isa;
}
}  // namespace

Isa init_active_isa() {
  // Read once; a bad SOMA_ISA throws here (on the first op), every time, before anything is
  // registered, and leaves the choice unset.
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  const int v = g_active_isa.load();
  if (v >= 0) return Isa(v);
  if (int(cpu_best_isa()) < int(compiled_isa_min()))
    fail("cpu", "this soma was compiled for ", isa_name(compiled_isa_min()),
         " (-march=native on another machine?) but this CPU supports only ",
         isa_name(cpu_best_isa()), "; rebuild with -DSOMA_NATIVE=OFF");
  const std::string env = env_isa();
  const Isa isa = clamp_isa(env.empty() ? Isa::avx512 : parse_isa(env));
  g_active_isa.store(int(isa));
  return isa;
}

Isa set_active_isa(Isa isa) {
  const Isa chosen = clamp_isa(isa);
  g_active_isa.store(int(chosen));
  return chosen;
}

}  // namespace soma::detail

namespace soma {

std::string cpu_isa() { return detail::isa_name(detail::active_isa()); }

std::string cpu_isa_summary() {
  using namespace detail;
  const Isa active = active_isa();
  std::string s = std::string(isa_name(active)) + " (cpu supports: ";
  for (int i = 0; i <= int(cpu_best_isa()); ++i) s += std::string(i ? " " : "") + kNames[i];
  if (cpu_has_avx512bf16()) s += " +avx512bf16";
  s += "; compiled: ";
  if (compiled_isa_min() == compiled_isa_max())
    s += std::string(isa_name(compiled_isa_min())) +
         (SOMA_ISA_MULTI || compiled_isa_min() == Isa::baseline ? "" : " only (SOMA_NATIVE)");
  else
    s += "baseline avx avx2 avx512";
  const std::string env = env_isa();
  if (!env.empty()) s += "; SOMA_ISA=" + env;
  return s + ")";
}

}  // namespace soma
