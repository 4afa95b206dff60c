#include "soma/model/weights.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>

#include "internal/atomic_file.hpp"
#include "soma/model/serialization.hpp"
#include "soma/ops.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

namespace {
constexpr char kMagic[8] = {'S', 'O', 'M', 'A', 'W', 'T', 'S', '1'};

template <class T>
void put(soma::internal::AtomicFile& os, T v) {
  os.write(&v, sizeof v);
}

template <class T>
T get(std::istream& is, const std::string& path) {
  T v{};
  if (!is.read(reinterpret_cast<char*>(&v), sizeof v))
    fail("load_weights", "'", path, "' is truncated");
  return v;
}
}  // namespace

void write_weights_file(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  soma::internal::AtomicFile os(path, "save_weights");  // atomic, durable replace
  os.write(kMagic, sizeof kMagic);
  put<std::uint64_t>(os, tensors.size());
  for (auto& [name, t0] : tensors) {
    Tensor t = t0.device().is_cpu() ? t0.contiguous() : t0.to(Device::cpu()).contiguous();
    put<std::uint32_t>(os, std::uint32_t(name.size()));
    os.write(name.data(), name.size());
    put<std::uint8_t>(os, std::uint8_t(t.dtype()));
    put<std::uint32_t>(os, std::uint32_t(t.rank()));
    for (auto d : t.shape()) put<std::int64_t>(os, d);
    const std::uint64_t nbytes = std::uint64_t(t.numel()) * dtype_size(t.dtype());
    put<std::uint64_t>(os, nbytes);
    if (nbytes) os.write(t.raw_data(), nbytes);
  }
  os.commit();
}

std::map<std::string, Tensor> read_weights_file(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) fail("load_weights", "cannot open '", path, "'");
  char magic[8];
  if (is.read(magic, sizeof magic) && std::memcmp(magic, "SOMAMDL", 8) == 0)
    return serialization::read_state_dict(path);  // the model-file format (Model::save_weights)
  if (!is || std::memcmp(magic, kMagic, sizeof magic) != 0)
    fail("load_weights", "'", path, "' is not a soma weights file (bad magic)");
  const auto count = get<std::uint64_t>(is, path);
  std::map<std::string, Tensor> out;
  for (std::uint64_t i = 0; i < count; ++i) {
    const auto len = get<std::uint32_t>(is, path);
    if (len > (1u << 20)) fail("load_weights", "'", path, "': corrupt entry ", i, " (name length)");
    std::string name(len, '\0');
    if (!is.read(name.data(), len)) fail("load_weights", "'", path, "' is truncated");
    const auto code = get<std::uint8_t>(is, path);
    if (code >= kNumDTypes) fail("load_weights", "'", path, "': unknown dtype code ", int(code));
    const auto dtype = DType(code);
    const auto rank = get<std::uint32_t>(is, path);
    if (rank > 64) fail("load_weights", "'", path, "': corrupt entry '", name, "' (rank)");
    Shape shape;
    for (std::uint32_t d = 0; d < rank; ++d) {
      shape.push_back(get<std::int64_t>(is, path));
      if (shape.back() < 0) fail("load_weights", "'", path, "': corrupt entry '", name, "'");
    }
    const auto nbytes = get<std::uint64_t>(is, path);
    if (nbytes != std::uint64_t(numel(shape)) * dtype_size(dtype))
      fail("load_weights", "'", path, "': entry '", name, "' has ", nbytes, " bytes for shape ",
           shape_str(shape));
    Tensor t = Tensor::empty(shape, dtype);
    if (nbytes && !is.read(static_cast<char*>(t.raw_data()), std::streamsize(nbytes)))
      fail("load_weights", "'", path, "' is truncated");
    out.emplace(std::move(name), t);
  }
  return out;
}

}  // namespace soma::model
