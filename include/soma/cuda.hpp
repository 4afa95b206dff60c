#pragma once
// The CUDA runtime as soma users see it: is a GPU there, memory statistics, synchronisation,
// timing events and the TF32 switch. Available in every build: without the CUDA backend (built
// only when nvcc is found, docs/cuda.md) these report "not built" and no device.
#include <cstddef>
#include <cstdint>
#include <string>

namespace soma::cuda {

// True when this libsoma was compiled with the CUDA backend.
bool is_built();
// True when the backend is built and at least one CUDA device can be used.
bool is_available();
// Number of usable CUDA devices (0 when none or not built).
int device_count();
// Why is_available() is false, e.g. "no CUDA device: cudaGetDeviceCount returned
// cudaErrorNoDevice (no CUDA-capable device is detected)"; empty when a device is usable.
std::string unavailable_reason();

// What `soma info` prints about a device (cudaGetDeviceProperties and the version queries).
struct DeviceProperties {
  int index = 0;
  std::string name;                  // e.g. "NVIDIA H100 80GB HBM3"
  std::size_t total_memory = 0;      // bytes
  std::size_t free_memory = 0;       // bytes, when read (cudaMemGetInfo); 0 otherwise
  int major = 0, minor = 0;          // compute capability, e.g. 9.0
  int multiprocessors = 0;
  int driver_version = 0;            // cudaDriverGetVersion: 13000 is CUDA 13.0
  int runtime_version = 0;           // cudaRuntimeGetVersion
};
// Throws soma::Error naming the reason when the device does not exist or CUDA is unusable.
DeviceProperties device_properties(int device = 0);
// The CUDA driver's and runtime's versions (1000 * major + 10 * minor); 0 when unknown (no
// driver, or not built). They answer without a device.
int driver_version();
int runtime_version();
// cuDNN's version as cudnnGetVersion gives it (e.g. 91900 for 9.19.0), from libcudnn.so.9 opened
// with dlopen; 0 when it cannot be loaded (cudnn_load_error() says why) or not built.
int cudnn_version();
std::string cudnn_load_error();
// "13.0" from 13000; "9.19.0" from 91900 (cuDNN 9's encoding: major*10000 + minor*100 + patch).
std::string cuda_version_str(int version);
std::string cudnn_version_str(int version);

// scaled_dot_product_attention on CUDA runs cuDNN's fused flash attention where it can (f16/bf16,
// no explicit mask, head dims multiples of 8 up to 256) and the op's composite kernel otherwise or
// when cuDNN refuses a shape (docs/attention.md; SOMA_CUDNN_ATTENTION=0 turns it off, =debug prints
// each fallback's reason once). These count the forward calls of each kind since the start (or
// the last reset) and keep the last fallback's reason; all zero without the CUDA backend.
struct FusedAttentionStats {
  std::uint64_t cudnn_calls = 0;
  std::uint64_t fallback_calls = 0;
  std::string last_fallback_reason;
};
FusedAttentionStats fused_attention_stats();
void reset_fused_attention_stats();
// Waits until all work queued on soma's stream of `device` (-1: every device) has finished.
// A no-op when no device is usable (nothing can have been queued).
void synchronize(int device = -1);

struct MemoryStats {
  std::size_t allocated_bytes = 0;       // held by live tensors
  std::size_t reserved_bytes = 0;        // obtained from cudaMalloc (allocated + cached)
  std::size_t peak_allocated_bytes = 0;  // since start or reset_peak_memory_stats()
  std::uint64_t num_allocs = 0;          // allocation requests
  std::uint64_t num_cache_hits = 0;      // requests served from the cache
  std::uint64_t num_device_mallocs = 0;  // cudaMalloc calls
};
// Statistics of the caching device allocator; all zero when the device was never used.
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Returns every cached (unused) block to the driver.
void empty_cache();

// Copies between the host and a device made by soma since the start of the process (or the last
// reset_transfer_stats()): Tensor::to between the CPU and a device, a CPU tensor that follows a
// device tensor into an op, fit's batches. Counted where the bytes move (core's copy path,
// src/core/device_backend.cpp), so they are the same for every backend and for the CPU stand-in
// of the tests. Tests use them to check that a training step copies only its batch; counting is
// two relaxed atomic adds per copy, so it is always on.
struct TransferStats {
  std::uint64_t host_to_device_copies = 0;
  std::uint64_t host_to_device_bytes = 0;
  std::uint64_t device_to_host_copies = 0;
  std::uint64_t device_to_host_bytes = 0;
};
TransferStats transfer_stats();
void reset_transfer_stats();

// f32 matmul and convolution on TF32 tensor cores (about 10 mantissa bits in the products, f32
// accumulation), as torch.backends.cuda.matmul.allow_tf32. On by default; the environment
// variable SOMA_ALLOW_TF32=0 (read at start-up) or set_allow_tf32(false) forces full f32.
void set_allow_tf32(bool allow);
bool allow_tf32();
// True when f32 matmul/convolution on `device` use TF32: allow_tf32() and the device has TF32
// tensor cores (compute capability 8.0, Ampere, or later). False without a usable device.
bool tf32_active(int device = 0);

// A CUDA event on soma's stream of a device, for timing device work:
//   cuda::Event start, stop; start.record(); ...ops...; stop.record();
//   float ms = start.elapsed_ms(stop);   // waits for stop
class Event {
 public:
  explicit Event(int device = 0) : device_(device) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : event_(o.event_), device_(o.device_) { o.event_ = nullptr; }
  Event& operator=(Event&& o) noexcept;

  // Records the event on the device's stream (throws soma::Error without a usable device).
  void record();
  // Waits until the recorded work has finished.
  void synchronize() const;
  // Milliseconds from this event to `end` (both recorded); waits for `end`.
  float elapsed_ms(const Event& end) const;
  int device() const { return device_; }

 private:
  void* event_ = nullptr;  // cudaEvent_t, created on first record()
  int device_ = 0;
};

}  // namespace soma::cuda
