// Limits on untrusted input (include/soma/input_limits.hpp).
#include "soma/input_limits.hpp"

#include "soma/error.hpp"

namespace soma::limits {

void check_json_text(std::string_view text, const std::string& what) {
  if (text.size() > kMaxJsonBytes)
    throw Error(what + ": JSON text of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
                std::to_string(kMaxJsonBytes) + " bytes");
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > kMaxJsonDepth)
          throw Error(what + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels of arrays/objects (at byte " + std::to_string(i) +
                      "); refusing to parse it (limit " + std::to_string(kMaxJsonDepth) + ")");
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced text is the parser's to report
        break;
      default: break;
    }
  }
}

namespace {
thread_local const std::string* t_source = nullptr;
}  // namespace

FileModelScope::FileModelScope(std::string source) : source_(std::move(source)), previous_(t_source) {
  t_source = &source_;
}
FileModelScope::~FileModelScope() { t_source = previous_; }
const std::string* file_model_source() { return t_source; }

void check_input_shape(const std::vector<std::int64_t>& shape, const std::string& what) {
  std::int64_t n = 1;
  bool overflow = false;
  std::string dims;
  for (auto d : shape) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    if (d > 0) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (overflow || n > kMaxElementsFromFile)
    throw Error(what + ": a sample of shape [" + excerpt(dims) + "] has more than " +
                std::to_string(kMaxElementsFromFile) + " elements (the limit for a tensor described by a file)");
}

std::string excerpt(std::string_view text, std::size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

}  // namespace soma::limits
