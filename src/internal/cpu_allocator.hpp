#pragma once
// Internal: the caching CPU allocator behind Storage::allocate. Training and inference loops
// allocate the same buffer sizes every step; handing freed blocks back for the next request of
// the same size skips malloc's aligned path, its consolidation and, for big buffers, the
// mmap/munmap + page-fault round trip of every step.
#include <cstddef>
#include <cstdint>

namespace soma::detail {

// 64-byte aligned memory for at least `nbytes` bytes (never null; throws std::bad_alloc).
void* cpu_allocate(std::size_t nbytes);
// Gives back memory from cpu_allocate(nbytes) (same nbytes); null is ignored.
void cpu_free(void* p, std::size_t nbytes);

// Memory from cpu_allocate held for the length of a scope (none until given a size).
class CpuBuffer {
 public:
  CpuBuffer() = default;
  explicit CpuBuffer(std::size_t nbytes) { reset(nbytes); }
  ~CpuBuffer() { cpu_free(p_, n_); }
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;
  // Gives back what it held and takes `nbytes` (nothing for 0).
  void reset(std::size_t nbytes) {
    cpu_free(p_, n_);
    p_ = nullptr, n_ = 0;
    if (nbytes) p_ = cpu_allocate(nbytes), n_ = nbytes;
  }
  void* get() const { return p_; }
  float* f() const { return static_cast<float*>(p_); }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

struct CpuCacheStats {
  std::size_t cached_bytes = 0;  // held in the cache now
  std::uint64_t hits = 0, misses = 0;
};
CpuCacheStats cpu_cache_stats();
// Frees every cached block.
void cpu_cache_release();
// Turns caching on or off (on by default; SOMA_CPU_CACHE=0 in the environment turns it off,
// e.g. for memory checkers). Turning it off releases the cache.
void set_cpu_cache_enabled(bool enabled);
bool cpu_cache_enabled();

// Blocks above this size are not cached. The cache holds at most twice the high-water mark of the
// bytes handed out at once, clamped to [kCpuCacheMinBytes, kCpuCacheMaxBytes], or 1.5 times the
// high-water mark where that is more (up to a quarter of physical memory); a block that does
// not fit evicts blocks of other sizes. After kCpuTrimAfterBytes of evictions, malloc_trim(0) returns
// malloc's free pages to the system (docs/reliability.md: a storm of shapes leaves RSS flat).
inline constexpr std::size_t kCpuCacheMaxBlock = std::size_t(64) << 20;
inline constexpr std::size_t kCpuCacheMaxBytes = std::size_t(256) << 20;
inline constexpr std::size_t kCpuCacheMinBytes = std::size_t(8) << 20;
inline constexpr std::size_t kCpuTrimAfterBytes = std::size_t(64) << 20;

}  // namespace soma::detail
