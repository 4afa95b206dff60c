#pragma once
// soma's global random generator state, for checkpoints that resume training exactly.
//
// The global generator is a (seed, call counter) pair (src/ops/random.cpp): every random op
// without a per-call seed takes the next counter value as its stream. Saving the pair and
// restoring it later makes every later unseeded draw (weight initialisers, unseeded Dropout,
// fit()'s shuffling without a seed) repeat exactly.
#include <cstdint>
#include <optional>
#include <utility>

#include "soma/tensor.hpp"

namespace soma {

class Attrs;

struct RngState {
  std::uint64_t seed = 0;
  std::uint64_t calls = 0;  // random ops drawn from the global generator since set_seed
  bool operator==(const RngState&) const = default;
};

RngState get_rng_state();
void set_rng_state(const RngState& state);

// Random values shaped like `like` (its shape and dtype). They are registered ops (as are
// random_uniform/normal/truncated_normal with a fixed shape), so in a graph or a traced function
// a draw from a symbolic `like` is a node that draws anew at every run: an unseeded one takes
// the next stream of the global generator when it runs (so a graph reproduces the eager
// sequence of draws), a seeded one its seed with the run number as stream (the first run gives
// the eager numbers). A fixed-shape draw inside a graph scope has no symbolic input: like every
// all-constant op it runs once, at build time (initial values of layer weights).
Tensor random_uniform_like(const Tensor& like, double minval = 0.0, double maxval = 1.0,
                           std::optional<std::uint64_t> seed = std::nullopt);
Tensor random_normal_like(const Tensor& like, double mean = 0.0, double stddev = 1.0,
                          std::optional<std::uint64_t> seed = std::nullopt);
Tensor truncated_normal_like(const Tensor& like, double mean = 0.0, double stddev = 1.0,
                             std::optional<std::uint64_t> seed = std::nullopt);

namespace detail {
// Dropout's uniform draw: eagerly seeded by mix(seed, calls); in a graph, run k of the node uses
// mix(seed, calls + k), so a traced step keeps the eager layer's sequence of masks.
Tensor dropout_uniform(const Tensor& like, std::optional<std::uint64_t> seed, std::uint64_t calls);
std::uint64_t splitmix64(std::uint64_t z);
// The (seed, stream) an unseeded random op takes now from the global generator.
std::pair<std::uint64_t, std::uint64_t> next_global_stream();
// For the random ops' kernels on other devices (src/backend/cuda), which draw the CPU's numbers:
// the (seed, stream) of one run of a random op with these attributes (an unseeded run takes the
// next stream of the global generator, as the CPU kernel does), and the largest value of a
// floating `dtype` below maxval (a draw that rounds up to maxval becomes it).
std::pair<std::uint64_t, std::uint64_t> random_op_stream(const Attrs& attrs);
double random_uniform_top(DType dtype, double maxval);
}  // namespace detail

}  // namespace soma
