#pragma once
// Limits on untrusted input (model files, JSON configs, data files), checked before anything is
// parsed recursively or allocated, so that a hostile or corrupt file gets a soma::Error naming the
// field and the limit instead of a stack overflow or an allocation that kills the process
// (docs/reliability.md, docs/errors.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace soma::limits {

// JSON documents (model configs, model-file headers, `soma train --config`) may nest arrays and
// objects this deep. soma writes at most ~10 levels per nested Sequential; Keras configs stay
// well below 64.
inline constexpr int kMaxJsonDepth = 256;

// A JSON text read from a file or config beyond this many bytes is refused before parsing.
inline constexpr std::uint64_t kMaxJsonBytes = std::uint64_t(64) << 20;

// Messages quote at most this many characters of an untrusted value, and at most
// kMaxDetailChars of a parser's own message (which may quote a value already cut).
inline constexpr std::size_t kMaxEchoChars = 200;
inline constexpr std::size_t kMaxDetailChars = 400;

// A tensor described by a file (a layer's weight built from a config, an image, a data set) may
// hold at most this many elements (2^31: 8 GiB of f32).
inline constexpr std::int64_t kMaxElementsFromFile = std::int64_t(1) << 31;

// While one is alive on this thread, a layer being built refuses a weight of more than
// kMaxElementsFromFile elements, naming the layer, the weight's shape, the limit and `source`
// (the file or config the model comes from). Model files, configs and the CLI's --config use it,
// so a file declaring Dense(1000000) on 1000000 inputs fails before allocating 4 TB.
class FileModelScope {
 public:
  explicit FileModelScope(std::string source);
  ~FileModelScope();
  FileModelScope(const FileModelScope&) = delete;
  FileModelScope& operator=(const FileModelScope&) = delete;

 private:
  std::string source_;
  const std::string* previous_;
};
// The innermost scope's source on this thread, or nullptr outside any scope.
const std::string* file_model_source();

// A model config (a file's, a Keras config, the CLI's --config) may list at most this many layers,
// and a functional one at most this many layer calls (Keras' largest applications have ~1000).
inline constexpr std::size_t kMaxLayersFromFile = 10000;

// Throws soma::Error when a per-sample input shape read from a file has more than
// kMaxElementsFromFile elements (a model is built by running its layers on one such sample).
// Unknown extents (-1) count as 1.
void check_input_shape(const std::vector<std::int64_t>& shape, const std::string& what);

// Throws soma::Error("<what>: JSON nests deeper than 256 levels (at byte N) ...") when `text`
// nests arrays/objects beyond kMaxJsonDepth (brackets inside strings do not count), and when it is
// longer than kMaxJsonBytes. A linear scan with no recursion: run it before a JSON parser.
void check_json_text(std::string_view text, const std::string& what);

// `text` cut to at most `max` characters, with "..." appended when cut.
std::string excerpt(std::string_view text, std::size_t max = kMaxEchoChars);

// A JSON value as text for a message: at most about `max` characters, written without recursing
// deeper than the characters it writes (so a deeply nested value cannot overflow the stack).
// Works with nlohmann::json (kept out of this header).
template <class Json>
void append_json_excerpt(const Json& j, std::string& out, std::size_t max) {
  if (out.size() >= max) return;
  if (j.is_array() || j.is_object()) {
    const bool obj = j.is_object();
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (out.size() >= max) return;
      if (!first) out += ',';
      first = false;
      if (obj) out += Json(it.key()).dump() + ':';
      append_json_excerpt(*it, out, max);
    }
    out += obj ? '}' : ']';
  } else {
    out += excerpt(j.dump(), max - out.size());
  }
}
template <class Json>
std::string json_excerpt(const Json& j, std::size_t max = kMaxEchoChars) {
  std::string out;
  append_json_excerpt(j, out, max);
  if (out.size() >= max) {
    out.resize(max);
    out += "...";
  }
  return out;
}

}  // namespace soma::limits
