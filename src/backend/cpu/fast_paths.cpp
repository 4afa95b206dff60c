#include "internal/fast_paths.hpp"

namespace soma::detail {

std::atomic<bool>& fast_paths_flag() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace soma::detail
