#pragma once
// Byte-level text for language models: every byte is a token (vocabulary 256), so any file
// encodes without a learned vocabulary and decode(encode(s)) == s for every string.
//
//   data::ByteTokenizer tok;
//   std::vector<std::int64_t> ids = tok.encode("hello");
//   auto [x, y] = data::text_windows(tok.encode(text), {.context = 64, .stride = 32});
//   // x [N, 64] int64 = bytes[i : i+64], y [N, 64] int64 = bytes[i+1 : i+65], i = 0, 32, 64, ...
//   auto ds = data::Dataset::from_tensor_slices({x, y}).shuffle(N, 1).batch(32);
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "soma/tensor.hpp"

namespace soma::data {

class ByteTokenizer {
 public:
  static constexpr std::int64_t kVocabSize = 256;
  std::int64_t vocab_size() const { return kVocabSize; }
  std::vector<std::int64_t> encode(std::string_view text) const;
  // Ids outside [0, 256) fail (naming the id and its position).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  // A 1-D tensor of ids (any integer or float dtype; a [1, T] row is accepted too).
  std::string decode(const Tensor& ids) const;
};

// The whole file, as bytes.
std::string read_text_file(const std::string& path);

struct TextWindowOptions {
  std::int64_t context = 64;  // T: the length of each window
  std::int64_t stride = 0;    // distance between window starts; 0 = context (no overlap)
};

struct TextWindows {
  Tensor x;  // [N, T] int64
  Tensor y;  // [N, T] int64, x shifted by one: the next token at each position
};

// Windows i = 0, stride, 2 stride, ... while i + T + 1 <= tokens.size(). Fails when not even one
// window fits (fewer than T + 1 tokens) or on context < 1 / stride < 0.
TextWindows text_windows(const std::vector<std::int64_t>& tokens, TextWindowOptions options = {});

}  // namespace soma::data
