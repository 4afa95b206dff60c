// Model files (docs/model-format.md) through load_model / load_weights.
//
// A file whose payload was mutated fails its CRC-32 and stops at the first check. So the first
// byte chooses the mode: even, the rest is the whole file as is; odd, the rest is a payload that
// this target wraps in a valid container (magic, version, kind, size and a correct CRC), so that
// the fuzzer reaches the header JSON, the tensor records and the model rebuild behind them.
// A model that loads is also run once on a small input.
#include <zlib.h>

#include <cstring>

#include "fuzz_target.hpp"
#include "soma/soma.hpp"

namespace soma::fuzz {

namespace {

template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void try_predict(nn::Model& m) {
  auto* seq = dynamic_cast<nn::Sequential*>(&m);
  if (!seq || !seq->input_shape()) return;
  Shape s = *seq->input_shape();
  if (s.empty()) return;
  s[0] = 1;
  for (auto d : s)
    if (d < 0 || d > 4096) return;
  if (numel(s) > 4096) return;
  (void)m.predict_on_batch(fill(s, 0.5));
}

}  // namespace

std::vector<std::uint8_t> wrap_model_payload(const std::uint8_t* payload, std::size_t n,
                                             std::uint32_t kind) {
  std::vector<std::uint8_t> out;
  const char magic[8] = {'S', 'O', 'M', 'A', 'M', 'D', 'L', '\0'};
  out.insert(out.end(), magic, magic + 8);
  put<std::uint32_t>(out, serialization::kFormatVersion);
  put<std::uint32_t>(out, kind);
  put<std::uint64_t>(out, n);
  put<std::uint32_t>(out, std::uint32_t(crc32(0L, payload, uInt(n))));
  out.insert(out.end(), payload, payload + n);
  return out;
}

void model_file(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const std::uint8_t mode = data[0];
  std::string path;
  if (mode & 1) {
    auto file = wrap_model_payload(data + 1, size - 1, (mode & 2) ? 2 : 1);
    path = memory_file(file.data(), file.size());
  } else {
    path = memory_file(data + 1, size - 1);
  }
  if (mode & 4) {  // weights into a fixed small model
    nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::Dense(2)};
    // Fixed names: auto-names depend on how many layers the process made before.
    for (std::size_t i = 0; i < m.layers().size(); ++i) m.layers()[i]->set_name("l" + std::to_string(i));
    m.load_weights(path);
    return;
  }
  auto m = load_model(path);
  try_predict(*m);
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::model_file)
