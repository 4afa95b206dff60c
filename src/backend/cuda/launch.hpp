#pragma once
// Internal: the interface between the host side of the CUDA backend (ops.cpp, C++20, soma types)
// and the kernels (kernels.cu, compiled by nvcc). Plain structs only, so that nvcc compiles no
// soma header and the kernels build fast. Every launcher queues work on `stream` and returns the
// launch status (cudaSuccess or the error); the host side turns errors into soma::Error.
// The elementwise ops are the table's (src/ops/elementwise_table.hpp, no soma header either).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/elementwise_table.hpp"

namespace soma::cuda_detail {

inline constexpr int kMaxDims = 8;

// Same order as soma::DType.
enum class ElemType : int { f32, f64, f16, bf16, i32, i64, u8, boolean, i8 };

// An operand: a pointer to its first element and its strides (in elements) over the launch's
// shape; stride 0 broadcasts.
struct Operand {
  void* data = nullptr;
  ElemType type = ElemType::f32;
  std::int64_t stride[kMaxDims] = {};
};

// The iteration space of an elementwise launch (dims coalesced by the host).
struct Space {
  int rank = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t numel = 0;
  bool packed = false;  // every operand is dense in row-major order over `shape`
};

// The elementwise table's ops, in its order.
enum class UnaryOp : int {
#define SOMA_CUDA_ENUM(NAME, ...) NAME,
  SOMA_ELEMENTWISE_UNARY(SOMA_CUDA_ENUM)
};
enum class BinaryOp : int {
  SOMA_ELEMENTWISE_BINARY(SOMA_CUDA_ENUM)
#undef SOMA_CUDA_ENUM
};
// Per op: its family (which types it takes, whether it returns bool).
#define SOMA_CUDA_FAMILY(NAME, FAM, ...) ew::Family::FAM,
inline constexpr ew::Family kUnaryFamily[] = {SOMA_ELEMENTWISE_UNARY(SOMA_CUDA_FAMILY)};
inline constexpr ew::Family kBinaryFamily[] = {SOMA_ELEMENTWISE_BINARY(SOMA_CUDA_FAMILY)};
#undef SOMA_CUDA_FAMILY
inline bool is_predicate(BinaryOp op) { return kBinaryFamily[int(op)] == ew::Family::Predicate; }

// out = op(in) (alpha, beta: the op's attributes, as in the table). The types of the op's family
// (ew::supports); out has in's type.
cudaError_t launch_unary(UnaryOp op, const Operand& in, const Operand& out, const Space& space,
                         double alpha, double beta, cudaStream_t stream);
// out = op(a, b); a and b have one type; out has it too, or bool for predicates.
cudaError_t launch_binary(BinaryOp op, const Operand& a, const Operand& b, const Operand& out,
                          const Space& space, cudaStream_t stream);
// out = cond ? a : b (cond bool).
cudaError_t launch_where(const Operand& cond, const Operand& a, const Operand& b,
                         const Operand& out, const Space& space, cudaStream_t stream);
// out = convert(in), any types to any types.
cudaError_t launch_copy(const Operand& in, const Operand& out, const Space& space,
                        cudaStream_t stream);
// out = value, any type.
cudaError_t launch_fill(const Operand& out, const Space& space, double value, cudaStream_t stream);

enum class ReduceOp : int { sum, mean, prod, max, min };

// Reduction of `in` over the `red` dims into `out` over the `kept` dims.
struct ReduceSpace {
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_shape[kMaxDims] = {}, red_shape[kMaxDims] = {};
  std::int64_t in_kept_stride[kMaxDims] = {}, in_red_stride[kMaxDims] = {};
  std::int64_t out_stride[kMaxDims] = {};
  std::int64_t kept_numel = 0, red_numel = 0;
};
// Types f32, f64, f16, bf16, i32, i64 (mean: floating only); out has in's type.
cudaError_t launch_reduce(ReduceOp op, const void* in, void* out, ElemType type,
                          const ReduceSpace& space, cudaStream_t stream);
// softmax / log_softmax along the single `red` dim (red_rank 1); out uses out_stride for the
// kept dims and out_red_stride along the axis. Floating types.
cudaError_t launch_softmax(bool log, const void* in, void* out, ElemType type,
                           const ReduceSpace& space, std::int64_t out_red_stride,
                           cudaStream_t stream);

}  // namespace soma::cuda_detail
