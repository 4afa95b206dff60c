// IDX files (MNIST and friends), raw or gzip-compressed.
#include "fuzz_target.hpp"
#include "soma/data/idx.hpp"

namespace soma::fuzz {

void idx(const std::uint8_t* data, std::size_t size) {
  Tensor t = data::read_idx(memory_file(data, size));
  (void)t.numel();
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::idx)
