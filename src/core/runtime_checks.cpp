// Numeric checking of op outputs and the allocation bound (soma/runtime_checks.hpp).
#include "soma/runtime_checks.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "internal/runtime_checks.hpp"
#include "soma/error.hpp"
#include "soma/op.hpp"
#include "soma/tensor.hpp"

namespace soma {

namespace detail {
std::atomic<bool> g_check_numerics{false};
}  // namespace detail

void set_check_numerics(bool on) { detail::g_check_numerics.store(on, std::memory_order_relaxed); }
bool check_numerics() { return detail::check_numerics_on(); }

namespace {

std::atomic<std::size_t> g_max_alloc{0};

// Physical memory plus swap: a tensor larger than this can never be backed, and with Linux's
// overcommit a plain malloc of it would succeed and the process die later on first touch.
std::size_t machine_memory() {
  static const std::size_t bytes = [] {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    std::size_t total = pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page)
                                              : std::size_t(1) << 40;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::size_t kb = 0;
    while (meminfo >> key >> kb) {
      if (key == "SwapTotal:") {
        total += kb * 1024;
        break;
      }
      meminfo.ignore(256, '\n');
    }
    return total;
  }();
  return bytes;
}

std::string human_bytes(std::size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

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

namespace detail {

void check_allocation(std::size_t nbytes, Device device) {
  std::size_t set = g_max_alloc.load(std::memory_order_relaxed);
  std::size_t limit = set ? set : machine_memory();
  if (nbytes <= limit) return;
  fail("allocate", "out of memory: a tensor of ", human_bytes(nbytes), " (", nbytes, " bytes) on ",
       device.str(), " is larger than ",
       set ? "the bound set with set_max_allocation_bytes (" + human_bytes(limit) + ")"
           : "this machine's memory and swap (" + human_bytes(limit) + ")");
}

void check_op_numerics(const OpDef& def, const std::vector<Tensor>& inputs,
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
    fail("check_numerics", "op '", def.name, "' produced ", nan ? "nan" : "inf",
         " at flat index ", at, " of output ", o, " (", shape_str(t.shape()), " ",
         dtype_name(t.dtype()), ") from inputs ", ins.empty() ? std::string("(none)") : ins,
         inputs_finite ? " that were all finite" : "",
         ". set_check_numerics(false) turns this check off");
  }
}

}  // namespace detail
}  // namespace soma
