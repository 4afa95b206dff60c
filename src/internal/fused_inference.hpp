#pragma once
// Internal: when a layer's inference may run a fused kernel instead of its ops (Dense's fused
// GEMV, Sequential's Dense chain, Conv2D's oneDNN primitive with bias and ReLU). The rule is the
// same for all of them: nothing may be able to tell the fused result from the ops'. Defined in
// src/nn/layers.cpp.
#include "soma/nn/activation.hpp"
#include "soma/tensor.hpp"

namespace soma::nn::fusion {

// The thread's state allows it: fast paths on, eager (no graph being built), no numerics check,
// no tape recording, no autocast.
bool fused_inference_state_ok();
// The same, with a tape allowed to record: for fused ops that have their own gradient.
bool fused_forward_state_ok();
// The same, with autocast allowed too: for fused ops whose kernels follow autocast themselves.
bool fused_op_state_ok();
// The activations a fused kernel computes: linear, or the built-in ReLU (a custom function that is
// merely named "relu" is not replaced). Sets *relu; false for any other activation.
bool fused_inference_activation(const Activation& act, bool* relu);
// An f32, contiguous, concrete (not graph-symbolic) CPU tensor.
bool is_cpu_f32_packed(const Tensor& t);

}  // namespace soma::nn::fusion
