#pragma once
// The message of the soma::Error a call throws, for tests of error messages (the bad-input rule:
// a clear soma::Error naming the op, the shapes and what was expected).
#include <functional>
#include <string>

#include "soma/error.hpp"

namespace soma::testing {

// What error_of returns when f throws no soma::Error (other exceptions propagate).
inline constexpr const char* kNoError = "(no soma::Error thrown)";

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return kNoError;
}

}  // namespace soma::testing
