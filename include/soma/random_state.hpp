#pragma once
// soma's global random generator state, for checkpoints that resume training exactly.
//
// The global generator is a (seed, call counter) pair (src/ops/random.cpp): every random op
// without a per-call seed takes the next counter value as its stream. Saving the pair and
// restoring it later makes every later unseeded draw (weight initialisers, unseeded Dropout,
// fit()'s shuffling without a seed) repeat exactly.
#include <cstdint>

namespace soma {

struct RngState {
  std::uint64_t seed = 0;
  std::uint64_t calls = 0;  // random ops drawn from the global generator since set_seed
  bool operator==(const RngState&) const = default;
};

RngState get_rng_state();
void set_rng_state(const RngState& state);

}  // namespace soma
