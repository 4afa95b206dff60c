#pragma once
// soma::Error: every bad call throws this, naming the op, the shapes/dtypes and what was expected.
#include <sstream>
#include <stdexcept>
#include <string>

namespace soma {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws soma::Error("<op>: <message>") built by streaming the arguments.
template <class... Args>
[[noreturn]] void fail(const std::string& op, const Args&... args) {
  throw Error(op + ": " + detail::cat(args...));
}

}  // namespace soma
