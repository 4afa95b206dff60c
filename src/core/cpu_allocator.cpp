#include "internal/cpu_allocator.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace soma::detail {

namespace {

constexpr std::size_t kAlign = 64;
// Sizes up to this many bytes index an array directly (one class per 64 bytes).
constexpr std::size_t kSmallMax = std::size_t(64) << 10;

std::size_t padded_size(std::size_t nbytes) {
  return (std::max<std::size_t>(nbytes, 1) + kAlign - 1) / kAlign * kAlign;
}

struct Cache {
  std::mutex mu;
  std::vector<std::vector<void*>> small = std::vector<std::vector<void*>>(kSmallMax / kAlign + 1);
  std::unordered_map<std::size_t, std::vector<void*>> large;
  std::size_t cached_bytes = 0;
  std::uint64_t hits = 0, misses = 0;

  std::vector<void*>& bin(std::size_t padded) {
    return padded <= kSmallMax ? small[padded / kAlign] : large[padded];
  }
  void release_locked() {
    for (auto& b : small) {
      for (void* p : b) std::free(p);
      b.clear();
    }
    for (auto& [size, b] : large)
      for (void* p : b) std::free(p);
    large.clear();
    cached_bytes = 0;
  }
};

// Never destroyed: tensors held in static objects are freed after static destructors run.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("SOMA_CPU_CACHE");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return on;
}

}  // namespace

void* cpu_allocate(std::size_t nbytes) {
  const std::size_t padded = padded_size(nbytes);
  if (padded <= kCpuCacheMaxBlock && enabled_flag().load(std::memory_order_relaxed)) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto& b = c.bin(padded);
    if (!b.empty()) {
      void* p = b.back();
      b.pop_back();
      c.cached_bytes -= padded;
      ++c.hits;
      return p;
    }
    ++c.misses;
  }
  void* p = std::aligned_alloc(kAlign, padded);
  if (!p) throw std::bad_alloc();
  return p;
}

void cpu_free(void* p, std::size_t nbytes) {
  if (!p) return;
  const std::size_t padded = padded_size(nbytes);
  if (padded <= kCpuCacheMaxBlock && enabled_flag().load(std::memory_order_relaxed)) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.cached_bytes + padded <= kCpuCacheMaxBytes) {
      c.bin(padded).push_back(p);
      c.cached_bytes += padded;
      return;
    }
  }
  std::free(p);
}

CpuCacheStats cpu_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.cached_bytes, c.hits, c.misses};
}

void cpu_cache_release() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.release_locked();
}

void set_cpu_cache_enabled(bool enabled) {
  enabled_flag().store(enabled);
  if (!enabled) cpu_cache_release();
}

bool cpu_cache_enabled() { return enabled_flag().load(); }

}  // namespace soma::detail
