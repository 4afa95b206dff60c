#pragma once
// Internal: lets GCC vectorise loops that call expf, erff and tanhf (std::exp, std::erf and
// std::tanh on floats) through glibc's vector math library, libmvec (_ZGVeN16v_expf and its
// SSE/AVX/AVX2 siblings), instead of one libm call per element (issue 26: the scalar calls in
// softmax, attention and GELU were ~10% of a transformer training step). glibc's <math.h>
// declares these SIMD variants only under -ffast-math; declaring them here keeps IEEE semantics
// (NaN, infinities, denormals) and needs -fopenmp (or -fopenmp-simd) and -fno-math-errno, which
// libsoma's CPU kernels are built with. libm.so's linker script pulls in libmvec as needed.
// Accuracy: tests/unit/test_vector_math.cpp measures the error of the vectorised paths over a
// dense sweep of floats against the correctly rounded f64 results (libmvec's own bound is 4 ulp).
// Include it before any loop that should use it; a compiler without these (clang, no OpenMP,
// another libc) just keeps the scalar calls.
#include <cmath>

#if defined(__GNUC__) && !defined(__clang__) && defined(_OPENMP) && defined(__x86_64__) && \
    defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define SOMA_HAS_LIBMVEC 1
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
}
#else
#define SOMA_HAS_LIBMVEC 0
#endif
