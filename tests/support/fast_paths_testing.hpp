#pragma once
// Test helpers for soma's CPU fast paths (src/internal/fast_paths.hpp): every fast path is
// checked against the generic code it replaces, with the switch flipped for one computation.
#include <cstring>
#include <utility>

#include "../../src/internal/fast_paths.hpp"
#include "soma/soma.hpp"

namespace soma::testing {

// Sets the fast paths on or off for a scope; restores the previous setting whatever happens.
struct FastPathsScope {
  bool before = detail::fast_paths_enabled();
  explicit FastPathsScope(bool on) { detail::set_fast_paths_enabled(on); }
  ~FastPathsScope() { detail::set_fast_paths_enabled(before); }
  FastPathsScope(const FastPathsScope&) = delete;
  FastPathsScope& operator=(const FastPathsScope&) = delete;
};

// f() with the fast paths on, then off: {fast, generic}.
template <class F>
std::pair<Tensor, Tensor> fast_and_generic(F&& f) {
  Tensor fast, generic;
  {
    FastPathsScope on(true);
    fast = f();
  }
  {
    FastPathsScope off(false);
    generic = f();
  }
  return {fast, generic};
}

// Bitwise equality of two tensors of the same shape and dtype (NaN == NaN, +0 != -0).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.raw_data(), bc.raw_data(), std::size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

}  // namespace soma::testing
