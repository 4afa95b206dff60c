// Numeric checking of op outputs and the allocation bound (soma/runtime_checks.hpp).
#include "soma/runtime_checks.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "internal/cpu_allocator.hpp"

#include "internal/runtime_checks.hpp"
#include "soma/error.hpp"
#include "soma/tensor.hpp"

namespace soma {

namespace detail {
std::atomic<bool> g_check_numerics{false};
}  // namespace detail

void set_check_numerics(bool on) { detail::g_check_numerics.store(on, std::memory_order_relaxed); }
bool check_numerics() { return detail::check_numerics_on(); }

namespace {

std::atomic<std::size_t> g_max_alloc{0};

// The fields of a /proc/meminfo file ("MemAvailable:", "SwapTotal:", ...) in bytes; empty when
// it cannot be read.
std::map<std::string, std::size_t> read_meminfo(const std::string& path) {
  std::map<std::string, std::size_t> fields;
  std::ifstream meminfo(path);
  std::string key;
  std::size_t kb = 0;
  while (meminfo >> key >> kb) {
    fields.emplace(key, kb * 1024);
    meminfo.ignore(256, '\n');
  }
  return fields;
}

// A field of read_meminfo's result, or nullptr.
const std::size_t* meminfo_field(std::map<std::string, std::size_t>&& fields, const std::string& key) = delete;
const std::size_t* meminfo_field(const std::map<std::string, std::size_t>& fields,
                                 const std::string& key) {
  // (never called on a temporary map: the pointer would dangle; see the deleted overload)
  const auto it = fields.find(key);
  return it == fields.end() ? nullptr : &it->second;
}

// Physical memory plus swap: a tensor larger than this can never be backed, and with Linux's
// overcommit a plain malloc of it would succeed and the process die later on first touch.
std::size_t machine_memory() {
  static const std::size_t bytes = [] {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    std::size_t total = pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page)
                                              : std::size_t(1) << 40;
    const auto fields = read_meminfo("/proc/meminfo");  // (kept: the field points into it)
    if (const std::size_t* swap = meminfo_field(fields, "SwapTotal:")) total += *swap;
    return total;
  }();
  return bytes;
}

}  // namespace

std::string detail::memory_size_str(std::size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

namespace {

std::string human_bytes(std::size_t n) { return detail::memory_size_str(n); }

bool is_finite_bits(DType t, const unsigned char* p) {
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return std::isfinite(v);
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, p, 8);
      return std::isfinite(v);
    }
    case DType::f16: {  // exponent all ones: inf or nan
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return (b & 0x7C00) != 0x7C00;
    }
    case DType::bf16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return (b & 0x7F80) != 0x7F80;
    }
    default: return true;
  }
}

// Flat (row-major) index of the first inf/nan, or -1. Any strides; CPU tensors only.
std::int64_t first_non_finite(const Tensor& t, bool& is_nan) {
  const DType dt = t.dtype();
  if (!(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16)) return -1;
  if (!t.device().is_cpu() || t.numel() == 0) return -1;
  const std::size_t es = dtype_size(dt);
  const auto* base = static_cast<const unsigned char*>(t.raw_data());
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> idx(rank, 0);
  const std::int64_t n = t.numel();
  std::int64_t off = 0;
  for (std::int64_t flat = 0; flat < n; ++flat) {
    const unsigned char* p = base + off * std::int64_t(es);
    if (!is_finite_bits(dt, p)) {
      double v = dt == DType::f32 ? double(*reinterpret_cast<const float*>(p))
                 : dt == DType::f64 ? *reinterpret_cast<const double*>(p)
                                    : 0.0;
      std::uint16_t b = 0;
      if (es == 2) std::memcpy(&b, p, 2);
      is_nan = es == 2 ? (dt == DType::f16 ? (b & 0x3FF) != 0 : (b & 0x7F) != 0) : std::isnan(v);
      return flat;
    }
    for (std::size_t d = rank; d-- > 0;) {  // odometer step
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  return -1;
}

}  // namespace

void set_max_allocation_bytes(std::size_t bytes) { g_max_alloc.store(bytes, std::memory_order_relaxed); }
std::size_t max_allocation_bytes() {
  std::size_t m = g_max_alloc.load(std::memory_order_relaxed);
  return m ? m : machine_memory();
}

std::size_t parse_memory_size(std::string_view text) {
  auto bad = [&] {
    fail("parse_memory_size", "'", std::string(text),
         "' is not a memory size: expected bytes or a number with a suffix K, M, G or T "
         "(powers of 1024), e.g. 1073741824, 512M, 2G, 1.5G");
  };
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == start) bad();
  const std::string number(text.substr(start, i - start));
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !(v >= 0)) bad();
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string suffix;
  for (; i < text.size(); ++i) suffix += char(std::toupper(static_cast<unsigned char>(text[i])));
  double scale = 1;
  if (!suffix.empty() && suffix != "B") {
    const std::string units = "KMGTP";
    const auto u = units.find(suffix[0]);
    if (u == std::string::npos) bad();
    const std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "IB")) bad();
    scale = std::pow(1024.0, double(u + 1));
  }
  const double bytes = v * scale;
  if (bytes >= 18446744073709549568.0) bad();
  if (bytes != std::floor(bytes) && scale == 1) bad();  // fractional bytes
  return std::size_t(bytes);
}

namespace {

enum class LimitOrigin { none, env, api };
std::atomic<LimitOrigin> g_limit_origin{LimitOrigin::none};

std::atomic<std::size_t>& limit_flag() {
  static std::atomic<std::size_t> limit{[] {
    const char* env = std::getenv("SOMA_MEMORY_LIMIT");
    if (!env || !*env) return std::size_t(0);
    std::size_t v = 0;
    try {
      v = parse_memory_size(env);
    } catch (const Error&) {
      fail("SOMA_MEMORY_LIMIT", "'", env,
           "' is not a memory size: expected bytes or a number with a suffix K, M, G or T, "
           "e.g. 512M, 2G");
    }
    g_limit_origin.store(LimitOrigin::env);
    return v;
  }()};
  return limit;
}

// The last reading of the system's memory and soma's bytes in use at the time.
std::atomic<std::size_t> g_sys_available{0};
std::atomic<std::size_t> g_sys_in_use_at{0};
std::atomic<bool> g_sys_read{false};

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return {};
  return line;
}

// A byte count from a cgroup file; false for "max", missing or unparsable files.
bool read_bytes(const std::string& path, std::size_t& out) {
  const std::string line = read_first_line(path);
  if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) return false;
  out = std::strtoull(line.c_str(), nullptr, 10);
  return true;
}

}  // namespace

void set_memory_limit(std::size_t bytes) {
  limit_flag().store(bytes, std::memory_order_relaxed);
  g_limit_origin.store(bytes ? LimitOrigin::api : LimitOrigin::none);
}
std::size_t memory_limit() { return limit_flag().load(std::memory_order_relaxed); }
std::size_t memory_in_use() { return detail::g_cpu_bytes_in_use.load(std::memory_order_relaxed); }

namespace detail {

std::atomic<std::size_t> g_cpu_bytes_in_use{0};

SystemMemory read_system_memory(const std::string& root) {
  SystemMemory best{std::size_t(-1), ""};
  auto consider = [&](std::size_t avail, std::string why) {
    if (avail < best.available) best = {avail, std::move(why)};
  };
  // /proc/meminfo: MemAvailable (what can be had without swapping) plus free swap.
  {
    const auto fields = read_meminfo(root + "/proc/meminfo");
    const std::size_t* mem_available = meminfo_field(fields, "MemAvailable:");
    const std::size_t* swap = meminfo_field(fields, "SwapFree:");
    const std::size_t available = mem_available ? *mem_available : 0;
    const std::size_t swap_free = swap ? *swap : 0;
    if (mem_available)
      consider(available + swap_free,
               swap_free ? "MemAvailable " + memory_size_str(available) + " and SwapFree " +
                               memory_size_str(swap_free) + " in /proc/meminfo"
                         : "MemAvailable in /proc/meminfo");
  }
  // The process's cgroup and its ancestors: v2 ("0::/path") and v1 ("N:...memory...:/path").
  std::ifstream cg(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    const auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    const bool v2 = line.compare(0, c1, "0") == 0 && controllers.empty();
    bool v1 = false;
    {
      std::stringstream ss(controllers);
      std::string c;
      while (std::getline(ss, c, ',')) v1 = v1 || c == "memory";
    }
    if (!v1 && !v2) continue;
    const std::string base = root + (v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
    const char* max_file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
    const char* cur_file = v2 ? "/memory.current" : "/memory.usage_in_bytes";
    if (path.empty() || path[0] != '/') path = "/" + path;
    // From the process's own cgroup up to the root (inside a container the hierarchy is often
    // mounted at the container's cgroup, so a path that is not there is skipped).
    for (;;) {
      const std::string dir = base + (path == "/" ? "" : path);
      std::size_t max = 0, cur = 0;
      // cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages): ignore >= 2^60.
      if (read_bytes(dir + max_file, max) && max < (std::size_t(1) << 60) &&
          read_bytes(dir + cur_file, cur))
        consider(max > cur ? max - cur : 0,
                 "cgroup " + path + ": " + std::string(max_file + 1) + " " + memory_size_str(max) +
                     ", " + memory_size_str(cur) + " in use");
      if (path == "/") break;
      const auto slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  if (best.why.empty()) best.available = std::size_t(-1);
  return best;
}

namespace {

std::string limit_origin_str() {
  switch (g_limit_origin.load()) {
    case LimitOrigin::env: return "SOMA_MEMORY_LIMIT";
    case LimitOrigin::api: return "set_memory_limit or soma --memory-limit";
    default: return "";
  }
}

[[noreturn]] void cannot_allocate(std::size_t nbytes, Device device, const std::string* what,
                                  std::size_t available, const std::string& why) {
  fail("allocate", "cannot allocate ", memory_size_str(nbytes),
       what ? " for " + *what : " (" + std::to_string(nbytes) + " bytes)", " on ", device.str(),
       ": ", memory_size_str(available), " available (", why, ")");
}

}  // namespace

void check_allocation(std::size_t nbytes, Device device, const std::string* what) {
  std::size_t set = g_max_alloc.load(std::memory_order_relaxed);
  std::size_t limit = set ? set : machine_memory();
  if (nbytes > limit)
    fail("allocate", "out of memory: a tensor of ", human_bytes(nbytes), " (", nbytes,
         " bytes) on ", device.str(), what ? " (" + *what + ")" : std::string(),
         " is larger than ",
         set ? "the bound set with set_max_allocation_bytes (" + human_bytes(limit) + ")"
             : "this machine's memory and swap (" + human_bytes(limit) + ")");
  if (!device.is_cpu()) return;
  const std::size_t in_use = g_cpu_bytes_in_use.load(std::memory_order_relaxed);
  if (const std::size_t budget = limit_flag().load(std::memory_order_relaxed)) {
    if (in_use + nbytes > budget)
      cannot_allocate(nbytes, device, what, budget > in_use ? budget - in_use : 0,
                      "the memory limit of " + memory_size_str(budget) + " set with " +
                          limit_origin_str() + ", " + memory_size_str(in_use) +
                          " in use by tensors");
  }
  // The system's memory: a fresh reading for big allocations, else the last reading while soma's
  // tensors have not grown by half of what it found available.
  if (nbytes < kFreshReadBytes && g_sys_read.load(std::memory_order_acquire)) {
    const std::size_t at = g_sys_in_use_at.load(std::memory_order_relaxed);
    const std::size_t grown = in_use > at ? in_use - at : 0;
    if (grown + nbytes < g_sys_available.load(std::memory_order_relaxed) / 2) return;
  }
  SystemMemory sys = read_system_memory();
  if (nbytes > sys.available) {
    // Freed tensors' memory kept for reuse, and what malloc holds free, count as used there.
    cpu_cache_release();
    ::malloc_trim(0);
    sys = read_system_memory();
  }
  g_sys_available.store(sys.available, std::memory_order_relaxed);
  g_sys_in_use_at.store(in_use, std::memory_order_relaxed);
  g_sys_read.store(true, std::memory_order_release);
  if (nbytes > sys.available) cannot_allocate(nbytes, device, what, sys.available, sys.why);
}

void allocation_failed(std::size_t nbytes, Device device, const std::string* what) {
  std::string why = "the system refused it";
  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    why += "; the address-space limit (RLIMIT_AS, ulimit -v) is " + memory_size_str(rl.rlim_cur);
  fail("allocate", "cannot allocate ", memory_size_str(nbytes),
       what ? " for " + *what : " (" + std::to_string(nbytes) + " bytes)", " on ", device.str(),
       ": ", why);
}

void check_op_numerics(std::string_view op, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& t = outputs[o];
    if (!t.defined()) continue;
    bool nan = false;
    std::int64_t at = first_non_finite(t, nan);
    if (at < 0) continue;
    std::string ins;
    bool inputs_finite = true;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      bool n2 = false;
      bool bad = first_non_finite(inputs[i], n2) >= 0;
      inputs_finite = inputs_finite && !bad;
      ins += (i ? ", " : "") + shape_str(inputs[i].shape()) + " " + dtype_name(inputs[i].dtype()) +
             (bad ? " (holds inf/nan)" : "");
    }
    fail("check_numerics", "op '", std::string(op), "' produced ", nan ? "nan" : "inf",
         " at flat index ", at, " of output ", o, " (", shape_str(t.shape()), " ",
         dtype_name(t.dtype()), ") from inputs ", ins.empty() ? std::string("(none)") : ins,
         inputs_finite ? " that were all finite" : "",
         ". set_check_numerics(false) turns this check off");
  }
}

}  // namespace detail
}  // namespace soma
