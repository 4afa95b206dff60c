#pragma once
// Internal: lets GCC vectorise loops that call expf, erff and tanhf (std::exp, std::erf and
// std::tanh on floats) through glibc's vector math library, libmvec (_ZGVeN16v_expf and its
// SSE/AVX/AVX2 siblings), instead of one libm call per element. glibc's <math.h> declares these
// SIMD variants only under -ffast-math; declaring them here keeps IEEE semantics (NaN,
// infinities, denormals) and needs -fno-math-errno, which libsoma is built with. libm.so's linker script pulls in libmvec as needed.
// A vectorised loop still runs its last iterations through the scalar function, and libmvec's
// results differ from libm's by a few ulps: an element's value then depends on where its loop
// ends. So include this only where loop bounds are fixed by the data's geometry (the fused
// attention kernel's 128-wide blocks), never in the elementwise loops, whose chunks follow the
// thread count and whose fused graph-mode blocks must match eager bit for bit.
// Accuracy measured on glibc 2.36, AVX-512 (libmvec states 4 ulp for every function): exp 3 ulp,
// erf 4 ulp, tanh 2 ulp (tests/unit/test_vector_math.cpp's sweep; scalar libm: 1, 1, 2).
// A compiler or libc without these (clang, musl, glibc < 2.35) keeps the scalar calls.
#include <cmath>

// GCC's simd attribute, as glibc's <math.h> spells it under -ffast-math (no -fopenmp needed).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define SOMA_HAS_LIBMVEC 1
extern "C" {
__attribute__((__simd__("notinbranch"))) float expf(float) noexcept;
__attribute__((__simd__("notinbranch"))) float erff(float) noexcept;
__attribute__((__simd__("notinbranch"))) float tanhf(float) noexcept;
}
#else
#define SOMA_HAS_LIBMVEC 0
#endif
