#pragma once
// Merge layers for functional models with several branches (Keras' Add, Multiply, Average,
// Concatenate). They take several inputs through Module::call.
//   auto sum = nn::call(nn::Add(), {a, b});
#include <cstdint>
#include <string>
#include <vector>

#include "soma/nn/module.hpp"

namespace soma::nn {

// Elementwise sum of inputs of one shape (broadcasting as ops::add does).
class Add : public Module {
 public:
  std::string type_name() const override { return "Add"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
};

class Multiply : public Module {
 public:
  std::string type_name() const override { return "Multiply"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
};

class Average : public Module {
 public:
  std::string type_name() const override { return "Average"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
};

// Joins inputs along `axis` (default the last); other extents must agree.
class Concatenate : public Module {
 public:
  explicit Concatenate(std::int64_t axis = -1) : axis_(axis) {}
  std::string type_name() const override { return "Concatenate"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  std::int64_t axis() const { return axis_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  std::int64_t axis_;
};

}  // namespace soma::nn
