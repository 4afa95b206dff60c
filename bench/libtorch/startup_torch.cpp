// Workload 9 (libtorch side): include the whole API, run one op, exit.
#include <torch/torch.h>

#include <cstdio>

int main() {
  auto x = torch::ones({1}) + torch::ones({1});
  std::printf("%g\n", x.item<float>());
  return 0;
}
