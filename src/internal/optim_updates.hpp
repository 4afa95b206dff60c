#pragma once
// Internal: the optimiser update ops (src/ops/optim_updates.cpp) and their kernels. Each update is
// one registered op, tagged in-place: it writes the variable (input 0) and its slots, returns no
// output and has no gradient. The composite kernels here, made of other ops, run on every device
// and for every floating dtype; the CPU kernels (src/backend/cpu/optim_updates.cpp) run the fused
// loop over f32/f64 memory and call these for anything else.
#include <atomic>
#include <vector>

#include "soma/op.hpp"

namespace soma::detail {

// Optimizer::set_fused_kernels: off, the CPU kernels take the composite path too (tests compare
// the two).
std::atomic<bool>& optim_fused_flag();

void sgd_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a);
void adam_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a);
void nadam_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a);
void rmsprop_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                              const Attrs& a);
void adagrad_update_composite(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                              const Attrs& a);

// Whether an update op's attributes ask for the step-scalars input (src/ops/optim_updates.cpp).
bool has_step_scalars(const Attrs& a);

void register_cpu_optim_update_kernels();  // src/backend/cpu/optim_updates.cpp

}  // namespace soma::detail
