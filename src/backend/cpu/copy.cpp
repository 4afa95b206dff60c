#include <cstring>

#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"

namespace soma::detail {

void copy_into(const Tensor& src, const Tensor& dst) {
  if (!src.device().is_cpu() || !dst.device().is_cpu())
    fail("copy", "only CPU tensors can be copied in this build");
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
  dispatch_dtype(src.dtype(), [&]<class S>() {
    dispatch_dtype(dst.dtype(), [&]<class D>() {
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
    });
  });
}

void fill_value(const Tensor& dst, double value) {
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

}  // namespace soma::detail
