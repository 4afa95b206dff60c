#pragma once
// Test inputs for ops whose inputs must satisfy a condition that uniform samples do not (an
// invertible or symmetric positive definite matrix): the op's file registers a function that
// maps the uniform f64 samples of its test entry (OpDef::test) onto inputs the op accepts, and
// tests/ops/test_op_registry.cpp applies it to every sample it draws. It extends OpTestSpec
// (and should move into it as a field when op.hpp next changes; it lives apart so that adding
// it did not rebuild every file that includes op.hpp).
#include <string_view>
#include <vector>

#include "soma/tensor.hpp"

namespace soma {

// Must accept zero-size shapes (the suite's empty-input variants go through it too).
using PrepareTestInputsFn = std::vector<Tensor> (*)(const std::vector<Tensor>& samples);

// Registers (or replaces) the preparer for an op's test samples.
void set_test_inputs_prepare(std::string_view op, PrepareTestInputsFn fn);
// The preparer for an op's test samples; nullptr: the samples as drawn.
PrepareTestInputsFn test_inputs_prepare(std::string_view op);

}  // namespace soma
