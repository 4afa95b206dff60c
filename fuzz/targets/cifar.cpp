// CIFAR-10 binary batches, raw or gzip-compressed.
#include "fuzz_target.hpp"
#include "soma/data/cifar.hpp"

namespace soma::fuzz {

void cifar(const std::uint8_t* data, std::size_t size) {
  auto b = data::read_cifar10_batch(memory_file(data, size));
  (void)b.x.numel();
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::cifar)
