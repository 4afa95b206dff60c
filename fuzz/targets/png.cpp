// PNG decoding (soma predict's image input). The first byte picks the channel count to convert
// to; the rest is the file.
#include "fuzz_target.hpp"
#include "soma/image.hpp"

namespace soma::fuzz {

void png(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const int channels[4] = {0, 1, 3, 4};
  Tensor img = image::decode_png({data + 1, size - 1}, {.channels = channels[data[0] & 3]});
  (void)img.numel();
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::png)
