// Workloads 9 and 10 (soma side): include the whole API, run one op, exit. bench/compare.sh
// times its compilation and its whole-process run next to startup_torch.cpp.
#include <soma/soma.hpp>

#include <cstdio>

int main() {
  auto x = soma::ones({1}) + soma::ones({1});
  std::printf("%g\n", x.item<float>());
  return 0;
}
