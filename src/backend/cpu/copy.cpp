#include <cstring>
#include <type_traits>

#include "core/device_backend.hpp"
#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"

#define SOMA_ISA_FILE "backend/cpu/copy.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
#if SOMA_ISA_MULTI
// The baseline pass's converting copy (below), which the other passes call for the dtype pairs
// they do not compile (in_this_pass).
namespace isa_baseline {
void convert_rows(const Tensor& src, const Strides& ss, const Tensor& dst);
}
#endif
SOMA_ISA_BEGIN

namespace {
// The dtype pairs an instruction-set pass compiles its own converting loop for: those with f32,
// f16 or bf16 on a side (the casts of training and inference, and the 16-bit conversions that
// F16C / AVX-512 speed up). The other pairs (integers, bool, f64 among themselves) run the
// baseline loop on every machine: 81 pairs in four passes were most of this file's build time.
template <class S, class D> constexpr bool in_this_pass() {
#if SOMA_ISA_ONCE
  return true;
#else
  return computes_in_f32_v<S> || computes_in_f32_v<D>;
#endif
}

// Packs a tensor whose last two axes are transposed in memory (source stride 1 on axis -2, not
// on axis -1) into a contiguous destination, in square tiles so that both the reads and the
// writes stay in cache. A plain row loop would stride through memory on every read.
template <class E>
void transpose_tiles(const E* src, E* dst, const Shape& shape, const Strides& ss,
                     std::int64_t src_offset) {
  constexpr std::int64_t kTile = 32;
  const std::size_t r = shape.size();
  const std::int64_t rows = shape[r - 2], cols = shape[r - 1];
  const std::int64_t col_stride = ss[r - 1];  // source stride along the destination's rows
  const std::int64_t outer = numel(shape) / (rows * cols);
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  parallel_for(outer * row_tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      std::int64_t o = t / row_tiles, i0 = (t % row_tiles) * kTile;
      std::int64_t soff = src_offset, rem = o;
      for (std::size_t d = r - 2; d-- > 0;) {
        soff += (rem % shape[d]) * ss[d];
        rem /= shape[d];
      }
      const E* s = src + soff;
      E* out = dst + o * rows * cols;
      std::int64_t i1 = std::min(rows, i0 + kTile);
      for (std::int64_t j0 = 0; j0 < cols; j0 += kTile) {
        std::int64_t j1 = std::min(cols, j0 + kTile);
        for (std::int64_t i = i0; i < i1; ++i)
          for (std::int64_t j = j0; j < j1; ++j) out[i * cols + j] = s[i + j * col_stride];
      }
    }
  });
}

bool transpose_copy(const Tensor& src, const Strides& ss, const Tensor& dst) {
  const std::size_t r = dst.shape().size();
  if (r < 2 || !dst.is_contiguous() || ss[r - 2] != 1 || ss[r - 1] == 1 || ss[r - 1] == 0 ||
      dst.shape()[r - 2] < 16 || dst.shape()[r - 1] < 16)
    return false;
  for (std::size_t d = 0; d + 2 < r; ++d)
    if (ss[d] == 0) return false;  // broadcast outer dims: leave to the general loop
  auto run = [&]<class E>() {
    transpose_tiles<E>(static_cast<const E*>(src.storage()->data), static_cast<E*>(dst.raw_data()),
                       dst.shape(), ss, src.offset());
  };
  switch (dtype_size(dst.dtype())) {
    case 1: run.template operator()<std::uint8_t>(); return true;
    case 2: run.template operator()<std::uint16_t>(); return true;
    case 4: run.template operator()<std::uint32_t>(); return true;
    case 8: run.template operator()<std::uint64_t>(); return true;
  }
  return false;
}
}  // namespace

void convert_rows(const Tensor& src, const Strides& ss, const Tensor& dst);

void copy_into(const Tensor& src, const Tensor& dst) {
  if (!src.device().is_cpu() || !dst.device().is_cpu())
    return device_copy_into(src, dst);  // the device's backend (core/device_backend.hpp)
  Shape bshape = broadcast_shapes(src.shape(), dst.shape(), "copy");
  if (bshape != dst.shape())
    fail("copy", "cannot write a tensor of shape ", shape_str(src.shape()), " into shape ",
         shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  // Fast path: same dtype, both packed, same shape.
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() &&
      dst.is_contiguous()) {
    std::size_t bytes = std::size_t(dst.numel()) * dtype_size(dst.dtype());
    if (src.raw_data() != dst.raw_data()) {
      char* d = static_cast<char*>(dst.raw_data());
      const char* s = static_cast<const char*>(src.raw_data());
      parallel_for(std::int64_t(bytes), kParallelGrain * 8, [&](std::int64_t b, std::int64_t e) {
        std::memcpy(d + b, s + b, std::size_t(e - b));
      });
    }
    return;
  }
  Strides ss = broadcast_strides(src.shape(), src.strides(), dst.shape());
  if (src.dtype() == dst.dtype() && transpose_copy(src, ss, dst)) return;
  convert_rows(src, ss, dst);
}

// dst = src converted to dst's dtype, src read with the (broadcast) strides ss.
void convert_rows(const Tensor& src, const Strides& ss, const Tensor& dst) {
  dispatch_dtype(src.dtype(), [&]<class S>() {
    dispatch_dtype(dst.dtype(), [&]<class D>() {
#if !SOMA_ISA_ONCE
      if constexpr (!in_this_pass<S, D>()) {
        isa_baseline::convert_rows(src, ss, dst);
        return;
      } else {
#endif
      const S* ps = static_cast<const S*>(src.storage()->data);
      D* pd = static_cast<D*>(dst.storage()->data);
      for_each_row<2>(dst.shape(), {&ss, &dst.strides()}, {src.offset(), dst.offset()},
                      [&](const std::array<std::int64_t, 2>& off, std::int64_t n,
                          const std::array<std::int64_t, 2>& inner) {
                        const S* s = ps + off[0];
                        D* d = pd + off[1];
                        if (inner[0] == 1 && inner[1] == 1) {
                          for (std::int64_t j = 0; j < n; ++j) d[j] = convert<D>(s[j]);
                        } else {
                          for (std::int64_t j = 0; j < n; ++j)
                            d[j * inner[1]] = convert<D>(s[j * inner[0]]);
                        }
                      });
#if !SOMA_ISA_ONCE
      }
#endif
    });
  });
}

void fill_value(const Tensor& dst, double value) {
  if (!dst.device().is_cpu()) return device_fill(dst, value);
  dispatch_dtype(dst.dtype(), [&]<class D>() {
    D v = convert<D>(value);
    D* pd = static_cast<D*>(dst.storage()->data);
    for_each_row<1>(dst.shape(), {&dst.strides()}, {dst.offset()},
                    [&](const std::array<std::int64_t, 1>& off, std::int64_t n,
                        const std::array<std::int64_t, 1>& inner) {
                      for (std::int64_t j = 0; j < n; ++j) pd[off[0] + j * inner[0]] = v;
                    });
  });
}
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The loops of the active instruction set (src/internal/cpu_isa.hpp): f16/bf16 conversions use
// F16C and wider vectors there.
void copy_into(const Tensor& src, const Tensor& dst) { SOMA_ISA_SELECT(copy_into)(src, dst); }
void fill_value(const Tensor& dst, double value) { SOMA_ISA_SELECT(fill_value)(dst, value); }
#endif

}  // namespace soma::detail
