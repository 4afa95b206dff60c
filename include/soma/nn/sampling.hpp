#pragma once
// Picking the next token from a language model's logits, as in GPT-2 / HuggingFace generate():
//
//   Tensor logits = model(context);                         // [B, T, V]; take the last position
//   Tensor ids = nn::sample_next(logits.slice(1, T - 1, T).squeeze({1}),
//                                {.temperature = 0.8, .top_k = 40, .seed = step});  // [B] int64
//
// Order: logits / temperature, then top-k (keep the k largest), then top-p (keep the smallest
// set of the largest probabilities whose sum reaches p; the largest is always kept), then one
// draw from the renormalised distribution. temperature <= 0 (or top_k = 1) is greedy: the
// argmax, ties to the lowest id. Runs on the host (the logits are copied there: one row per
// sequence, so the cost is V per step).
#include <cstdint>
#include <optional>

#include "soma/tensor.hpp"

namespace soma::nn {

struct SamplingOptions {
  double temperature = 1.0;  // <= 0: greedy
  std::int64_t top_k = 0;    // 0: all tokens
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus cut
  // The draw's seed: the same seed and logits give the same ids. Without one a seed is taken
  // from soma's global generator (set_seed), so a seeded program is reproducible too.
  std::optional<std::uint64_t> seed = std::nullopt;
};

// logits [V] -> [] or [B, V] -> [B]: int64 token ids.
Tensor sample_next(const Tensor& logits, const SamplingOptions& options = {});

}  // namespace soma::nn
