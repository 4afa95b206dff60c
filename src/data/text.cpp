#include "soma/data/text.hpp"

#include <fstream>
#include <iterator>
#include <sstream>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::data {

std::vector<std::int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(std::int64_t(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize)
      fail("ByteTokenizer::decode", "id ", ids[i], " at position ", i,
           " is not a byte (expected 0..255)");
    s.push_back(static_cast<char>(static_cast<unsigned char>(ids[i])));
  }
  return s;
}

std::string ByteTokenizer::decode(const Tensor& ids) const {
  const bool row = ids.rank() == 2 && ids.dim(0) == 1;
  if (ids.rank() != 1 && !row)
    fail("ByteTokenizer::decode", "ids of shape ", ids.shape(), ": expected [T] or [1, T]");
  return decode(ids.to(Device::cpu()).to_vector<std::int64_t>());
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("read_text_file", "cannot open '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TextWindows text_windows(const std::vector<std::int64_t>& tokens, TextWindowOptions options) {
  const std::int64_t T = options.context;
  const std::int64_t stride = options.stride == 0 ? T : options.stride;
  if (T < 1 || stride < 1)
    fail("text_windows", "context ", T, ", stride ", options.stride,
         ": expected context >= 1 and stride >= 0 (0 = context)");
  const std::int64_t n = std::int64_t(tokens.size());
  if (n < T + 1)
    fail("text_windows", n, " tokens cannot give one window of context ", T, " (need ", T + 1,
         ")");
  const std::int64_t count = (n - T - 1) / stride + 1;
  std::vector<std::int64_t> xs(std::size_t(count * T)), ys(std::size_t(count * T));
  for (std::int64_t w = 0; w < count; ++w)
    for (std::int64_t t = 0; t < T; ++t) {
      xs[std::size_t(w * T + t)] = tokens[std::size_t(w * stride + t)];
      ys[std::size_t(w * T + t)] = tokens[std::size_t(w * stride + t + 1)];
    }
  return {constant(xs, {count, T}), constant(ys, {count, T})};
}

}  // namespace soma::data
