#include "core/device_backend.hpp"

#include "soma/cuda.hpp"

namespace soma::detail {

#ifdef SOMA_HAS_CUDA
const DeviceBackend* cuda_device_backend();  // src/backend/cuda/runtime.cpp
#endif

const DeviceBackend* device_backend(DeviceKind kind) {
#ifdef SOMA_HAS_CUDA
  if (kind == DeviceKind::CUDA) return cuda_device_backend();
#endif
  (void)kind;
  return nullptr;
}

namespace {
const DeviceBackend& backend_or_fail(Device device, const char* op) {
  const DeviceBackend* b = device_backend(device.kind);
  if (!b) fail(op, "device ", device.str(), " is not available in this build: ",
               cuda::unavailable_reason());
  return *b;
}
}  // namespace

std::shared_ptr<Storage> device_storage(std::size_t nbytes, Device device) {
  const DeviceBackend& b = backend_or_fail(device, "allocate");
  auto s = std::make_shared<Storage>();
  s->data = nbytes > 0 ? b.allocate(nbytes, device.index) : nullptr;
  s->nbytes = nbytes;
  s->device = device;
  return s;
}

void device_free(void* p, std::size_t nbytes, Device device) noexcept {
  if (!p) return;
  if (const DeviceBackend* b = device_backend(device.kind)) b->free(p, nbytes, device.index);
}

Tensor to_device(const Tensor& t, Device device) {
  const Device from = t.device();
  const DeviceBackend& b = backend_or_fail(from.is_cpu() ? device : from, "to");
  if (!from.is_cpu() && !device.is_cpu()) backend_or_fail(device, "to");
  if (std::string why = b.unavailable_reason(); !why.empty())
    fail("to", "device ", device.str(), " is not available: ", why);
  // Pack on the side that holds the data, then one flat copy of the bytes.
  Tensor src = t.contiguous();
  Tensor dst = Tensor::empty(t.shape(), t.dtype(), device);
  const std::size_t nbytes = std::size_t(t.numel()) * dtype_size(t.dtype());
  if (nbytes > 0) b.copy_bytes(dst.raw_data(), device, src.raw_data(), from, nbytes);
  return dst;
}

void device_copy_into(const Tensor& src, const Tensor& dst) {
  if (src.device() != dst.device())
    fail("copy", "source is on ", src.device().str(), " and destination on ",
         dst.device().str(), "; move one with to(device) first");
  backend_or_fail(dst.device(), "copy").copy_strided(src, dst);
}

void device_fill(const Tensor& dst, double value) {
  backend_or_fail(dst.device(), "fill").fill(dst, value);
}

}  // namespace soma::detail

namespace soma::cuda {
// Version numbers to text, in every build (soma info prints them).
std::string cuda_version_str(int version) {
  if (version <= 0) return "unknown";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}
std::string cudnn_version_str(int version) {
  if (version <= 0) return "unknown";
  // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + ...
  const int major_unit = version >= 90000 ? 10000 : 1000;
  return std::to_string(version / major_unit) + "." + std::to_string(version % major_unit / 100) +
         "." + std::to_string(version % 100);
}
}  // namespace soma::cuda

#ifndef SOMA_HAS_CUDA
// The public CUDA API of a build without the backend (src/backend/cuda/runtime.cpp otherwise).
namespace soma::cuda {
bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() {
  return "soma was built without CUDA (nvcc was not found or SOMA_ENABLE_CUDA=OFF)";
}
void synchronize(int) {}
DeviceProperties device_properties(int) { fail("device_properties", unavailable_reason()); }
int driver_version() { return 0; }
int runtime_version() { return 0; }
int cudnn_version() { return 0; }
std::string cudnn_load_error() { return unavailable_reason(); }
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}
namespace {
bool g_allow_tf32 = true;
}
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
Event::~Event() = default;
Event& Event::operator=(Event&& o) noexcept {
  std::swap(event_, o.event_);
  std::swap(device_, o.device_);
  return *this;
}
void Event::record() { fail("cuda::Event", unavailable_reason()); }
void Event::synchronize() const { fail("cuda::Event", unavailable_reason()); }
float Event::elapsed_ms(const Event&) const { fail("cuda::Event", unavailable_reason()); }
}  // namespace soma::cuda
#endif
