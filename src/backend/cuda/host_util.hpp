#pragma once
// Internal (host side of the CUDA backend): the small helpers every kernel file needs to turn
// tensors into launch arguments (ops.cpp, index_ops.cpp, conv.cpp, dense.cpp, optim_ops.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/launch.hpp"
#include "backend/cuda/runtime.hpp"
#include "internal/copy.hpp"
#include "soma/error.hpp"
#include "soma/tensor.hpp"

namespace soma::cuda_detail {

// launch.hpp's ElemType has soma::DType's order.
inline ElemType elem(DType t) { return static_cast<ElemType>(static_cast<int>(t)); }
inline bool is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// The address of a tensor's first element (null when it has none).
inline void* first_element(const Tensor& t) {
  if (t.numel() == 0) return nullptr;
  return static_cast<char*>(t.storage()->data) + t.offset() * std::int64_t(dtype_size(t.dtype()));
}

// Makes the tensor's device current for this thread and returns its index.
inline int device_of(const Tensor& t, const char* op) { return use_device(t.device().index, op); }

// A kernel launch's status as soma::Error naming the op.
inline void launched(cudaError_t st, const char* op, int device) {
  check(st, op, "kernel launch", device);
}

// `t` itself when packed, else a packed copy on its device.
inline Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), t.dtype(), t.device());
  detail::copy_into(t, p);
  return p;
}

// A reduction of `x` over the `reduced` dims into `o` (keepdims or not): the kept and reduced
// dims with their strides, and the output's packed strides over the kept dims.
inline ReduceSpace reduce_space(const char* op, const Tensor& x, const Tensor& o,
                                const std::vector<bool>& reduced) {
  ReduceSpace s;
  s.kept_numel = 1;
  s.red_numel = 1;
  // The output's strides over the kept dims: o has them in order, with or without the reduced
  // dims kept as size 1 (whose strides are never used).
  Strides ost = contiguous_strides(o.shape());
  std::size_t oi = 0;
  const bool keepdims = o.rank() == x.rank();
  for (std::size_t d = 0; d < std::size_t(x.rank()); ++d) {
    const std::int64_t n = x.shape()[d];
    if (reduced[d]) {
      if (keepdims) ++oi;
      if (s.red_rank == kMaxDims) fail(op, "more than ", kMaxDims, " reduced dimensions on cuda");
      s.red_shape[s.red_rank] = n;
      s.in_red_stride[s.red_rank++] = x.strides()[d];
      s.red_numel *= n;
    } else {
      if (s.kept_rank == kMaxDims) fail(op, "more than ", kMaxDims, " kept dimensions on cuda");
      s.kept_shape[s.kept_rank] = n;
      s.in_kept_stride[s.kept_rank] = x.strides()[d];
      s.out_stride[s.kept_rank++] = ost[oi++];
      s.kept_numel *= n;
    }
  }
  return s;
}

// The device word where index kernels (gather, scatter, take_along_axis, ...) record the first
// bad index position (~0: none); throw_if_bad turns it into the CPU kernel's message.
class BadIndex {
 public:
  BadIndex(int device, const char* op) : device_(device), op_(op) {
    p_ = static_cast<unsigned long long*>(allocate(sizeof(unsigned long long), device));
    check(cudaMemsetAsync(p_, 0xff, sizeof(unsigned long long), stream(device)), op,
          "cudaMemsetAsync", device);
  }
  ~BadIndex() { deallocate(p_, sizeof(unsigned long long), device_); }
  BadIndex(const BadIndex&) = delete;
  BadIndex& operator=(const BadIndex&) = delete;
  unsigned long long* get() const { return p_; }
  // Waits for the kernels and throws the CPU kernel's message for a bad index.
  void throw_if_bad(const Tensor& ids, std::int64_t n, int axis) const {
    unsigned long long pos = 0;
    check(cudaMemcpyAsync(&pos, p_, sizeof pos, cudaMemcpyDeviceToHost, stream(device_)), op_,
          "cudaMemcpyAsync", device_);
    check(cudaStreamSynchronize(stream(device_)), op_, "cudaStreamSynchronize", device_);
    if (pos == ~0ull) return;
    std::int64_t j = 0;
    const std::size_t es = dtype_size(ids.dtype());
    check(cudaMemcpy(&j, static_cast<const char*>(first_element(ids)) + pos * es, es,
                     cudaMemcpyDeviceToHost),
          op_, "cudaMemcpy", device_);
    if (ids.dtype() == DType::i32) j = std::int64_t(static_cast<std::int32_t>(j));
    fail(op_, "index ", j, " is out of range for axis ", axis, " of size ", n, " (expected ", -n,
         " <= index < ", n, ")");
  }

 private:
  int device_;
  const char* op_;
  unsigned long long* p_ = nullptr;
};

}  // namespace soma::cuda_detail
