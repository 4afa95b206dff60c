// Host side of the CUDA backend: device discovery, per-device streams and cuBLAS handles, the
// caching device allocator, host/device copies, events and the public soma::cuda API.
#include "backend/cuda/runtime.hpp"

#include "backend/cuda/cublas_loader.hpp"
#include "backend/cuda/cudnn_loader.hpp"
#include "backend/cuda/math_policy.hpp"
#include "core/tf32_env.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "soma/cuda.hpp"
#include "soma/error.hpp"

namespace soma::cuda_detail {
namespace {

constexpr int kMaxDevices = 64;

// A CUDA graph replays its kernels at the addresses they had when it was captured, so memory
// allocated during a capture comes from a pool private to that graph: its blocks are handed only
// to allocations of that same capture (a block freed during the capture may be reused by the
// capture: the graph keeps the stream's order), never to other allocations while the graph
// lives, so a replay cannot overwrite another tensor. When the graph is destroyed the pool is
// orphaned: its free blocks go to the device's cache at once, the rest as their tensors go.
struct GraphPool {
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // by bucket size
  bool orphaned = false;
  std::size_t live = 0;  // blocks of the pool held by tensors
};

struct DeviceCache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // by bucket size
  std::size_t cached_bytes = 0;
  cuda::MemoryStats stats;
  GraphPool* capturing = nullptr;                   // the pool of the capture under way
  std::unordered_map<void*, GraphPool*> pool_of;    // every block that belongs to a pool
};

struct DeviceState {
  std::once_flag stream_once, blas_once, cc_once;
  int cc_major = 0;  // compute capability (major), read once
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::atomic<bool> used{false};  // a stream exists: synchronize() visits it
  DeviceCache cache;
};

struct Runtime {
  int count = 0;
  std::string reason;
  bool cache_enabled = true;
  DeviceState* devices = nullptr;
};

// Discovered once. Never destroyed: tensors in static storage may free device memory after
// main() returns, and the free lists must still be there for them.
const Runtime& runtime() {
  static const Runtime* r = [] {
    auto* rt = new Runtime;
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess) {
      rt->reason = std::string("no CUDA device: cudaGetDeviceCount returned ") +
                   cudaGetErrorName(st) + " (" + cudaGetErrorString(st) + ")";
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      n = 0;
    } else if (n == 0) {
      rt->reason = "no CUDA device: cudaGetDeviceCount found 0 devices";
    }
    rt->count = n < kMaxDevices ? n : kMaxDevices;
    const char* env = std::getenv("SOMA_CUDA_CACHE");  // 0: cudaMalloc/cudaFree every time
    rt->cache_enabled = !(env && std::string(env) == "0");
    rt->devices = new DeviceState[std::size_t(kMaxDevices)];
    return rt;
  }();
  return *r;
}

DeviceState& state(int device) { return runtime().devices[device]; }

// Bucket sizes: 512-byte steps up to 1 MiB, then steps of 1/8 of the power of two below, so a
// request wastes at most 12.5% and repeated shapes hit the same bucket.
std::size_t bucket_size(std::size_t n) {
  if (n == 0) n = 1;
  if (n <= (std::size_t(1) << 20)) return (n + 511) & ~std::size_t(511);
  std::size_t p = std::size_t(1) << (63 - __builtin_clzll(n));  // power of two <= n
  std::size_t step = p / 8;
  return (n + step - 1) / step * step;
}

void release_cache(int device) {
  DeviceCache& c = state(device).cache;
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) {
      cudaFree(p);  // waits for the device; errors here leave the block lost, not reused
      c.stats.reserved_bytes -= size;
    }
    blocks.clear();
  }
  c.cached_bytes = 0;
}

std::atomic<bool> g_allow_tf32{detail::allow_tf32_from_env(std::getenv("SOMA_ALLOW_TF32"))};

}  // namespace

std::string reason() { return runtime().reason; }

void check(cudaError_t status, const char* op, const char* what, int device) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // a non-sticky error must not resurface in the next check
  fail(op, what, " failed on cuda:", device, ": ", cudaGetErrorName(status), " (",
       cudaGetErrorString(status), ")");
}

void check_cublas(cublasStatus_t status, const char* op, const char* what, int device) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (!cublas_loaded()) fail(op, what, " failed on cuda:", device, ": cuBLAS status ", int(status));
  const CublasApi& api = cublas_api(op);
  fail(op, what, " failed on cuda:", device, ": ", api.status_name(status), " (",
       api.status_string(status), ")");
}

int use_device(int device, const char* op) {
  const Runtime& rt = runtime();
  if (rt.count == 0) fail(op, "device cuda:", device, " is not available: ", rt.reason);
  if (device < 0 || device >= rt.count)
    fail(op, "device cuda:", device, " does not exist (", rt.count, " CUDA device",
         rt.count == 1 ? "" : "s", " found)");
  thread_local int current = -1;
  if (current != device) {
    check(cudaSetDevice(device), op, "cudaSetDevice", device);
    current = device;
  }
  return device;
}

cudaStream_t stream(int device) {
  DeviceState& s = state(device);
  std::call_once(s.stream_once, [&] {
    use_device(device, "cuda");
    check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cuda",
          "cudaStreamCreateWithFlags", device);
    s.used = true;
  });
  return s.stream;
}

cublasHandle_t cublas(int device) {
  DeviceState& s = state(device);
  std::call_once(s.blas_once, [&] {
    use_device(device, "matmul");
    const CublasApi& api = cublas_api("matmul");
    check_cublas(api.create(&s.blas), "matmul", "cublasCreate", device);
    check_cublas(api.set_stream(s.blas, stream(device)), "matmul", "cublasSetStream", device);
  });
  return s.blas;
}

void* allocate(std::size_t nbytes, int device) {
  use_device(device, "allocate");
  const Runtime& rt = runtime();
  DeviceCache& c = state(device).cache;
  const std::size_t size = bucket_size(nbytes);
  GraphPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.stats.num_allocs;
    pool = c.capturing;
    if (pool) {  // during a capture: the graph's own blocks only
      auto it = pool->free_blocks.find(size);
      if (it != pool->free_blocks.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        ++pool->live;
        ++c.stats.num_cache_hits;
        c.stats.allocated_bytes += size;
        if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes)
          c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
        return p;
      }
    } else if (rt.cache_enabled) {
      auto it = c.free_blocks.find(size);
      if (it != c.free_blocks.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        c.cached_bytes -= size;
        ++c.stats.num_cache_hits;
        c.stats.allocated_bytes += size;
        if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes)
          c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
        return p;
      }
    }
  }
  void* p = nullptr;
  cudaError_t st = cudaMalloc(&p, size);
  if (st == cudaErrorMemoryAllocation) {  // give the cached blocks back and try once more
    cudaGetLastError();
    release_cache(device);
    st = cudaMalloc(&p, size);
  }
  if (st != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    cuda::MemoryStats s = cuda::memory_stats(device);
    if (st == cudaErrorMemoryAllocation)
      fail("allocate", "out of memory on cuda:", device, ": could not allocate ", nbytes,
           " bytes (soma holds ", s.allocated_bytes, " bytes in tensors and ",
           s.reserved_bytes - s.allocated_bytes, " cached; the device has ", free_b,
           " of ", total_b, " bytes free)");
    check(st, "allocate", "cudaMalloc", device);
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  if (pool) {
    c.pool_of[p] = pool;
    ++pool->live;
  }
  ++c.stats.num_device_mallocs;
  c.stats.reserved_bytes += size;
  c.stats.allocated_bytes += size;
  if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes)
    c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
  return p;
}

void deallocate(void* p, std::size_t nbytes, int device) noexcept {
  if (!p || device < 0 || device >= kMaxDevices) return;
  const Runtime& rt = runtime();
  DeviceCache& c = state(device).cache;
  const std::size_t size = bucket_size(nbytes);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.allocated_bytes -= size;
  if (!c.pool_of.empty()) {
    auto it = c.pool_of.find(p);
    if (it != c.pool_of.end()) {
      GraphPool* pool = it->second;
      --pool->live;
      if (!pool->orphaned) {  // reserved for its graph
        pool->free_blocks[size].push_back(p);
        return;
      }
      c.pool_of.erase(it);  // the graph is gone: an ordinary block again
      if (pool->live == 0) delete pool;
    }
  }
  if (rt.cache_enabled) {
    c.free_blocks[size].push_back(p);
    c.cached_bytes += size;
  } else {
    cudaSetDevice(device);
    cudaFree(p);  // never throws; an error (e.g. at exit, runtime unloaded) loses the block
    cudaGetLastError();
    c.stats.reserved_bytes -= size;
  }
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes) {
  if (nbytes == 0) return;
  if (src_device.is_cpu()) {  // host -> device: the staged copy has read src when this returns
    const int d = use_device(dst_device.index, "to");
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream(d)), "to",
          "copy from cpu", d);
  } else if (dst_device.is_cpu()) {  // device -> host: complete before returning
    const int d = use_device(src_device.index, "to");
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream(d)), "to",
          "copy to cpu", d);
    check(cudaStreamSynchronize(stream(d)), "to", "copy to cpu (or an earlier kernel)", d);
  } else if (src_device == dst_device) {
    const int d = use_device(dst_device.index, "copy");
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream(d)), "copy",
          "device copy", d);
  } else {  // between devices: wait for the source's work, copy on the destination's stream
    const int s = use_device(src_device.index, "to");
    check(cudaStreamSynchronize(stream(s)), "to", "synchronize", s);
    const int d = use_device(dst_device.index, "to");
    check(cudaMemcpyPeerAsync(dst, d, src, s, nbytes, stream(d)), "to", "peer copy", d);
    check(cudaStreamSynchronize(stream(d)), "to", "peer copy", d);
  }
}

// ---- pinned host memory, async copies, events (fit's batch staging, model/batch_stager) --------
namespace {
// Page-locked blocks by exact size: a stager asks for the same sizes in every fit, and
// cudaHostAlloc/cudaFreeHost are slow (they map pages and synchronise the device).
struct PinnedCache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;
};
PinnedCache& pinned_cache() {
  static auto* c = new PinnedCache();  // never destroyed: blocks may be freed after exit
  return *c;
}
}  // namespace

void* allocate_pinned(std::size_t nbytes) {
  PinnedCache& c = pinned_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(nbytes);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  int device = 0;
  cudaGetDevice(&device);
  void* p = nullptr;
  check(cudaHostAlloc(&p, nbytes, cudaHostAllocDefault), "fit", "cudaHostAlloc (pinned batch)",
        device);
  return p;
}

void free_pinned(void* p, std::size_t nbytes) noexcept {
  if (!p) return;
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.free_blocks[nbytes].push_back(p);
}

void copy_to_device_async(void* dst, Device dst_device, const void* src, std::size_t nbytes) {
  if (nbytes == 0) return;
  const int d = use_device(dst_device.index, "to");
  check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream(d)), "to",
        "async copy from pinned memory", d);
}

void* create_event(int device) {
  use_device(device, "fit");
  cudaEvent_t ev = nullptr;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "fit", "cudaEventCreate", device);
  return ev;
}

void record_event(void* event, int device) {
  use_device(device, "fit");
  check(cudaEventRecord(static_cast<cudaEvent_t>(event), stream(device)), "fit",
        "cudaEventRecord", device);
}

void wait_event(void* event, int device) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "fit",
        "cudaEventSynchronize (a batch copy or an earlier kernel)", device);
}

void destroy_event(void* event, int) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

namespace {
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  GraphPool* pool = nullptr;
};

// Ends a pool's reservation (c.mutex held): its free blocks go to the device's cache (or back to
// the driver without caching); blocks still held follow when freed (deallocate).
void orphan_pool(DeviceCache& c, GraphPool* pool, int device) {
  pool->orphaned = true;
  for (auto& [size, blocks] : pool->free_blocks)
    for (void* p : blocks) {
      c.pool_of.erase(p);
      if (runtime().cache_enabled) {
        c.free_blocks[size].push_back(p);
        c.cached_bytes += size;
      } else {
        cudaSetDevice(device);
        cudaFree(p);
        cudaGetLastError();
        c.stats.reserved_bytes -= size;
      }
    }
  pool->free_blocks.clear();
  if (pool->live == 0) delete pool;
}
}  // namespace

void begin_capture(int device) {
  use_device(device, "cuda_graph");
  cudaStream_t s = stream(device);
  DeviceCache& c = state(device).cache;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.capturing) fail("cuda_graph", "a capture is already under way on cuda:", device);
    c.capturing = new GraphPool;
  }
  // Relaxed: the capture's own cudaMalloc calls (new pool blocks) are allowed.
  const cudaError_t st = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (st != cudaSuccess) {
    std::lock_guard<std::mutex> lock(c.mutex);
    orphan_pool(c, c.capturing, device);
    c.capturing = nullptr;
    check(st, "cuda_graph", "cudaStreamBeginCapture", device);
  }
}

void* end_capture(int device, std::string* why) {
  use_device(device, "cuda_graph");
  DeviceCache& c = state(device).cache;
  GraphPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    pool = c.capturing;
    c.capturing = nullptr;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t st = cudaStreamEndCapture(stream(device), &graph);
  const char* what = "cudaStreamEndCapture";
  cudaGraphExec_t exec = nullptr;
  if (st == cudaSuccess) {
    st = cudaGraphInstantiate(&exec, graph, 0);
    what = "cudaGraphInstantiate";
  }
  if (graph) cudaGraphDestroy(graph);
  if (st != cudaSuccess) {
    if (why)
      *why = std::string(what) + ": " + cudaGetErrorName(st) + " (" + cudaGetErrorString(st) + ")";
    cudaGetLastError();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (pool) orphan_pool(c, pool, device);
    return nullptr;
  }
  return new CapturedGraph{exec, pool};
}

bool capturing(int device) {
  DeviceCache& c = state(device).cache;
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.capturing != nullptr;
}

void launch_graph(void* graph, int device) {
  use_device(device, "cuda_graph");
  auto* g = static_cast<CapturedGraph*>(graph);
  check(cudaGraphLaunch(g->exec, stream(device)), "cuda_graph", "cudaGraphLaunch", device);
}

void destroy_graph(void* graph, int device) noexcept {
  auto* g = static_cast<CapturedGraph*>(graph);
  if (!g) return;
  cudaSetDevice(device);
  // The stream may still run a replay: the pool's blocks are reused only in stream order after it.
  if (g->exec) cudaGraphExecDestroy(g->exec);
  cudaGetLastError();
  if (g->pool) {
    DeviceCache& c = state(device).cache;
    std::lock_guard<std::mutex> lock(c.mutex);
    orphan_pool(c, g->pool, device);
  }
  delete g;
}

int compute_major(int device) {
  DeviceState& s = state(device);
  std::call_once(s.cc_once, [&] {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      major = 0;  // unknown: no TF32 asked for
    }
    s.cc_major = major;
  });
  return s.cc_major;
}

cublasComputeType_t gemm_compute_type(DType t, int device) {
  switch (gemm_compute(t, g_allow_tf32, compute_major(device))) {
    case GemmCompute::k32FFastTF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmCompute::k64F: return CUBLAS_COMPUTE_64F;
    case GemmCompute::k32F: break;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace soma::cuda_detail

// ---- public API --------------------------------------------------------------------------------
namespace soma::cuda {
using namespace cuda_detail;

bool is_built() { return true; }
bool is_available() { return runtime().count > 0; }
int device_count() { return runtime().count; }
std::string unavailable_reason() { return runtime().reason; }

DeviceProperties device_properties(int device) {
  use_device(device, "device_properties");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "device_properties", "cudaGetDeviceProperties",
        device);
  DeviceProperties out;
  out.index = device;
  out.name = p.name;
  out.total_memory = p.totalGlobalMem;
  out.major = p.major;
  out.minor = p.minor;
  out.multiprocessors = p.multiProcessorCount;
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) out.free_memory = free_b;
  cudaGetLastError();
  out.driver_version = driver_version();
  out.runtime_version = runtime_version();
  return out;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) v = 0;
  cudaGetLastError();
  return v;
}

int runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = 0;
  cudaGetLastError();
  return v;
}

// The convolution kernels' loader (cudnn_loader.cpp) opens cuDNN once; asking its version loads it.
int cudnn_version() { return int(cuda_detail::cudnn_version()); }
std::string cudnn_load_error() { return cuda_detail::cudnn_unavailable_reason(); }

void synchronize(int device) {
  const Runtime& rt = runtime();
  if (rt.count == 0) return;
  for (int d = 0; d < rt.count; ++d) {
    if (device >= 0 && d != device) continue;
    if (!state(d).used) continue;  // nothing was ever queued there
    use_device(d, "synchronize");
    check(cudaStreamSynchronize(stream(d)), "synchronize", "cudaStreamSynchronize", d);
  }
  if (device >= rt.count) use_device(device, "synchronize");  // the error for a bad index
}

MemoryStats memory_stats(int device) {
  const Runtime& rt = runtime();
  if (device < 0 || device >= rt.count) return {};
  DeviceCache& c = state(device).cache;
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak_memory_stats(int device) {
  const Runtime& rt = runtime();
  if (device < 0 || device >= rt.count) return;
  DeviceCache& c = state(device).cache;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
}

void empty_cache() {
  const Runtime& rt = runtime();
  for (int d = 0; d < rt.count; ++d) {
    if (!state(d).used) continue;
    use_device(d, "empty_cache");
    release_cache(d);
  }
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
bool tf32_active(int device) {
  if (device < 0 || device >= runtime().count) return false;
  return uses_tf32(DType::f32, g_allow_tf32, compute_major(device));
}

Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Event& Event::operator=(Event&& o) noexcept {
  std::swap(event_, o.event_);
  std::swap(device_, o.device_);
  return *this;
}

void Event::record() {
  use_device(device_, "cuda::Event");
  if (!event_) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cuda::Event", "cudaEventCreate", device_);
    event_ = e;
  }
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream(device_)), "cuda::Event",
        "cudaEventRecord", device_);
}

void Event::synchronize() const {
  if (!event_) fail("cuda::Event", "synchronize() on an event that was never recorded");
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cuda::Event",
        "cudaEventSynchronize", device_);
}

float Event::elapsed_ms(const Event& end) const {
  if (!event_ || !end.event_)
    fail("cuda::Event", "elapsed_ms needs two recorded events (record() both first)");
  end.synchronize();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_),
                             static_cast<cudaEvent_t>(end.event_)),
        "cuda::Event", "cudaEventElapsedTime", device_);
  return ms;
}

}  // namespace soma::cuda
