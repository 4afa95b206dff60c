#pragma once
// Internal: the inline loops of fused f32 elementwise chains (src/graph/session.cpp runs a
// chain block by block; each op is one of these loops over an L1-sized block). Compiled with
// the CPU kernels' flags (-fno-math-errno: std::sqrt vectorises).
#include <cstdint>
#include <string_view>

#include "ops/elementwise_table.hpp"
#include "soma/op.hpp"

namespace soma::detail {

// An op of the elementwise table (src/ops/elementwise_table.hpp), or Kernel: an op run by its own
// kernel on the block. Only the table's Fuse::Registers ops are done inline: their functor,
// instantiated for f32 and for vector registers, is the very formula the CPU kernels compute
// (so the fused result is bit-identical).
enum class FusedCode : std::uint8_t {
  Kernel,
#define SOMA_FUSED_CODE(NAME, ...) NAME,
  SOMA_ELEMENTWISE_UNARY(SOMA_FUSED_CODE) SOMA_ELEMENTWISE_BINARY(SOMA_FUSED_CODE)
#undef SOMA_FUSED_CODE
};

// One op of a chain: operand k is the chain value (the previous op's result), an f32 array
// indexed like the output, or a scalar.
struct FusedInstr {
  enum Kind : std::uint8_t { Chain, Array, Scalar };
  FusedCode code = FusedCode::Kernel;
  int nargs = 0;
  Kind kind[2] = {Chain, Chain};
  const float* p[2] = {nullptr, nullptr};  // Array: element 0
  float v[2] = {0, 0};                     // Scalar
  double alpha = 0, beta = 0;              // the op's attributes (the table's alpha, beta)
};

// Whether graph mode fuses op into elementwise chains (the table's fuse column: Registers or
// Blocks; ops outside the table: no).
bool fusable_op(std::string_view op);
// The instruction for op with its attributes: code Kernel unless the op has an inline form.
FusedInstr fused_instr(std::string_view op, const Attrs& attrs);

// dst[i] = op(a[i], b[i]) for i < n; a null pointer means the scalar (av or bv) instead. Unary
// ops read a only. in.code is an inline op (not Kernel).
void fused_block_op(const FusedInstr& in, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n);

// Whether this build has fused_chain_in_registers (x86 with AVX or AVX-512; elsewhere chains run
// one fused_block_op per op over an L1 block).
bool fused_chain_in_registers_available();
// dst[i] for b <= i < b + n: the whole chain on a group of vector registers at a time, so the
// chain value never goes to memory (one load per array operand and one store per element, no
// per-op load and store through L1). Every op is computed exactly as fused_block_op computes it.
// All codes must be inline ones (not Kernel); the first op reads no Chain operand. stream: store
// with streaming stores (then call stream_store_fence before other threads read dst).
void fused_chain_in_registers(const FusedInstr* prog, int nprog, float* dst, std::int64_t b,
                              std::int64_t n, bool stream);

// Outputs at least this large are written with non-temporal (streaming) stores: they would not
// stay in the cache anyway, and a plain store first reads each output line from memory (the
// write-allocate), so streaming cuts a one-pass chain's memory traffic from 3 to 2 passes.
inline constexpr std::int64_t kStreamStoreBytes = std::int64_t(16) << 20;
// dst[i] = src[i] for i < n with streaming stores where the CPU has them (plain ones elsewhere);
// a thread calls stream_store_fence() after its last stream_store_block, before others read.
void stream_store_block(float* __restrict dst, const float* src, std::int64_t n);
void stream_store_fence();

}  // namespace soma::detail
