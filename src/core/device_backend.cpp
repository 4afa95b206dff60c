#include "core/device_backend.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_set>

#include "core/tf32_env.hpp"
#include "internal/copy.hpp"
#include "soma/cuda.hpp"

namespace soma::detail {

#ifdef SOMA_HAS_CUDA
const DeviceBackend* cuda_device_backend();  // src/backend/cuda/runtime.cpp
#endif

namespace {
std::atomic<const DeviceBackend*> g_override[kNumDeviceKinds] = {};

struct TransferCounters {
  std::atomic<std::uint64_t> h2d_copies{0}, h2d_bytes{0}, d2h_copies{0}, d2h_bytes{0};
};
TransferCounters& transfer_counters() {
  static TransferCounters c;
  return c;
}
}  // namespace

void count_transfer(bool to_device, std::size_t nbytes) noexcept {
  TransferCounters& c = transfer_counters();
  (to_device ? c.h2d_copies : c.d2h_copies).fetch_add(1, std::memory_order_relaxed);
  (to_device ? c.h2d_bytes : c.d2h_bytes).fetch_add(nbytes, std::memory_order_relaxed);
}

const DeviceBackend* set_device_backend_override(DeviceKind kind, const DeviceBackend* table) {
  return g_override[int(kind)].exchange(table);
}

const DeviceBackend* device_backend(DeviceKind kind) {
  if (const DeviceBackend* o = g_override[int(kind)].load(std::memory_order_acquire)) [[unlikely]]
    return o;
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

bool free_if_emulated(void* p) noexcept;  // below

void device_free(void* p, std::size_t nbytes, Device device) noexcept {
  if (!p) return;
  // Memory of the stand-in goes back to it even after its scope ended (a tensor that outlived
  // the test's scope must not reach the real backend's cache).
  if (free_if_emulated(p)) return;
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
  if (from.is_cpu() != device.is_cpu()) count_transfer(from.is_cpu(), nbytes);
  return dst;
}

// ---- the emulated device --------------------------------------------------------------------
namespace {
// The same tensor seen as a CPU tensor (same storage and geometry), for the CPU routines.
Tensor host_alias(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->device = Device::cpu();
  return Tensor(std::move(impl));
}
// The stand-in's live blocks, so that device_free recognises them whatever table is installed.
std::atomic<std::size_t> g_emulated_live{0};
std::mutex& emulated_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<void*>& emulated_blocks() {
  static auto* blocks = new std::unordered_set<void*>();  // never destroyed: frees after exit
  return *blocks;
}

void* emulated_allocate(std::size_t nbytes, int) {
  void* p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(emulated_mutex());
  emulated_blocks().insert(p);
  g_emulated_live.fetch_add(1, std::memory_order_relaxed);
  return p;
}
void emulated_free(void* p, std::size_t, int) { free_if_emulated(p); }
void emulated_copy_bytes(void* dst, Device, const void* src, Device, std::size_t nbytes) {
  std::memcpy(dst, src, nbytes);
}
void emulated_copy_strided(const Tensor& src, const Tensor& dst) {
  copy_into(host_alias(src), host_alias(dst));
}
void emulated_fill(const Tensor& dst, double value) { fill_value(host_alias(dst), value); }
std::string emulated_reason() { return {}; }
}  // namespace

bool free_if_emulated(void* p) noexcept {
  if (g_emulated_live.load(std::memory_order_relaxed) == 0) return false;
  {
    std::lock_guard<std::mutex> lock(emulated_mutex());
    if (emulated_blocks().erase(p) == 0) return false;
  }
  g_emulated_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
  return true;
}

const DeviceBackend* emulated_device_backend() {
  static const DeviceBackend table{
      .allocate = emulated_allocate,
      .free = emulated_free,
      .copy_bytes = emulated_copy_bytes,
      .copy_strided = emulated_copy_strided,
      .fill = emulated_fill,
      .unavailable_reason = emulated_reason,
  };
  return &table;
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
TransferStats transfer_stats() {
  auto& c = detail::transfer_counters();
  TransferStats s;
  s.host_to_device_copies = c.h2d_copies.load(std::memory_order_relaxed);
  s.host_to_device_bytes = c.h2d_bytes.load(std::memory_order_relaxed);
  s.device_to_host_copies = c.d2h_copies.load(std::memory_order_relaxed);
  s.device_to_host_bytes = c.d2h_bytes.load(std::memory_order_relaxed);
  return s;
}
void reset_transfer_stats() {
  auto& c = detail::transfer_counters();
  c.h2d_copies = 0;
  c.h2d_bytes = 0;
  c.d2h_copies = 0;
  c.d2h_bytes = 0;
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
FusedAttentionStats fused_attention_stats() { return {}; }
void reset_fused_attention_stats() {}
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}
namespace {
bool g_allow_tf32 = detail::allow_tf32_from_env(std::getenv("SOMA_ALLOW_TF32"));
}
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
bool tf32_active(int) { return false; }
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
