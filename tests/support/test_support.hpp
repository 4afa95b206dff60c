#pragma once
// Shared test helpers: random inputs independent of soma's own RNG, naive comparisons and the
// finite-difference gradient check every differentiable op goes through.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "soma/soma.hpp"

namespace soma::testing {

// Uniform values in [lo, hi) from std::mt19937_64 (not soma's RNG, so tests do not trust it).
Tensor rand_tensor(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                   DType dtype = DType::f64);
// The same values as `t` (any dtype) in a non-contiguous view: every other element of a buffer
// twice as large along the last axis.
Tensor noncontiguous(const Tensor& t);

// Row-major linear index <-> multi-index, for naive references.
std::vector<std::int64_t> unravel(std::int64_t i, const Shape& shape);
std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape);

// Elementwise |a - b| <= atol + rtol * |b|, shapes equal; failures name the first bad index.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                     double atol = 1e-6, double rtol = 1e-6);
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double atol = 1e-6, double rtol = 1e-6);

// Checks the tape's gradients of f at `inputs` (f64 tensors) against central differences:
// L(x) = sum(f(x) * w) for a fixed random w. Only inputs listed in `wrt` are checked (all when
// empty).
::testing::AssertionResult check_gradients(
    const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
    double eps = 1e-6, double tol = 1e-5, std::vector<int> wrt = {});

}  // namespace soma::testing
