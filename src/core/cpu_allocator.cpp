#include "internal/cpu_allocator.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
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

// A quarter of the physical memory (the most a large peak may keep cached).
std::size_t large_cap_limit() {
  static const std::size_t limit = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) / 4 : kCpuCacheMaxBytes;
  }();
  return limit;
}

struct Cache {
  std::mutex mu;
  std::vector<std::vector<void*>> small = std::vector<std::vector<void*>>(kSmallMax / kAlign + 1);
  std::unordered_map<std::size_t, std::vector<void*>> large;
  std::size_t cached_bytes = 0;
  std::uint64_t hits = 0, misses = 0;
  // Bytes handed out and not yet given back, and their high-water mark: the cache holds at most
  // twice that (a loop's buffers of different sizes, each freed before the next is taken, need
  // more than the peak: at the peak alone, LeNet inference at batch 256 lost a third of its
  // speed), between kCpuCacheMinBytes and kCpuCacheMaxBytes.
  std::size_t out_bytes = 0, peak_out_bytes = 0;
  // Bytes freed to malloc by evictions since the last malloc_trim.
  std::size_t evicted_since_trim = 0;

  std::size_t cap() const {
    // A training step that holds more than the fixed cap at its peak (a transformer's saved
    // activations) would otherwise give most of its buffers back to malloc each step and fault
    // them in again the next (issue 26: ~1 GiB of page faults per step): keep half again the
    // peak, up to a quarter of the machine's memory.
    return std::max(std::clamp(2 * peak_out_bytes, kCpuCacheMinBytes, kCpuCacheMaxBytes),
                    std::min(peak_out_bytes + peak_out_bytes / 2, large_cap_limit()));
  }
  // Frees cached blocks of other sizes than `keep` until `need` more bytes fit under the cap.
  void evict_for_locked(std::size_t need, std::size_t keep) {
    auto drain = [&](std::vector<void*>& b, std::size_t size) {
      while (!b.empty() && cached_bytes + need > cap()) {
        std::free(b.back());
        b.pop_back();
        cached_bytes -= size;
        evicted_since_trim += size;
      }
    };
    for (auto it = large.begin(); it != large.end() && cached_bytes + need > cap();) {
      if (it->first != keep) drain(it->second, it->first);
      it = it->second.empty() ? large.erase(it) : std::next(it);
    }
    for (std::size_t i = small.size(); i-- > 0 && cached_bytes + need > cap();)
      if (i * kAlign != keep) drain(small[i], i * kAlign);
  }

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
    c.out_bytes += padded;
    c.peak_out_bytes = std::max(c.peak_out_bytes, c.out_bytes);
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
  if (!p) {
    if (padded <= kCpuCacheMaxBlock && enabled_flag().load(std::memory_order_relaxed)) {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      c.out_bytes -= std::min(c.out_bytes, padded);
    }
    throw std::bad_alloc();
  }
  return p;
}

void cpu_free(void* p, std::size_t nbytes) {
  if (!p) return;
  const std::size_t padded = padded_size(nbytes);
  if (padded <= kCpuCacheMaxBlock && enabled_flag().load(std::memory_order_relaxed)) {
    Cache& c = cache();
    bool trim = false;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      c.out_bytes -= std::min(c.out_bytes, padded);
      // Full: make room by freeing blocks of other sizes (a program that keeps changing shapes
      // would otherwise fill the cache with sizes never asked for again, and keep them).
      if (c.cached_bytes + padded > c.cap()) c.evict_for_locked(padded, padded);
      if (c.cached_bytes + padded <= c.cap()) {
        c.bin(padded).push_back(p);
        c.cached_bytes += padded;
        p = nullptr;
      } else {
        c.evicted_since_trim += padded;
      }
      // After many evictions, hand malloc's free pages back to the system (freed blocks in the
      // middle of the heap stay resident otherwise).
      if (c.evicted_since_trim >= kCpuTrimAfterBytes) {
        c.evicted_since_trim = 0;
        trim = true;
      }
    }
    if (p) std::free(p);
    if (trim) ::malloc_trim(0);
    return;
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
