#pragma once
// nn::Module: the base of every layer and model. Holds named parameters (Variables) and named
// submodules, a train/eval flag, and builds its parameters lazily on the first call, when the
// input shape is known (as Keras layers do).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "soma/device.hpp"
#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/ref.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma::nn {

class Module;
using ModuleRef = Ref<Module>;

class Module {
 public:
  virtual ~Module() = default;

  // Runs the layer; builds it first on the first call. Inputs are batched (axis 0 is the batch).
  Tensor operator()(const Tensor& x);
  // Several inputs / outputs (RNN states, functional models). Default: forward of one tensor.
  virtual std::vector<Tensor> call(const std::vector<Tensor>& inputs);

  // The type shown by summary() ("Dense", "Conv2D"). The instance name defaults to its
  // snake_case with a per-type counter ("dense", "dense_1", ...).
  virtual std::string type_name() const = 0;
  const std::string& name() const;
  Module& set_name(std::string name);

  // Shape of the output for an input of shape `input_shape` (batch dim included, may be -1).
  // The default runs the layer on zeros with batch 1 and reads the result's shape.
  virtual Shape output_shape(const Shape& input_shape);

  bool built() const { return built_; }
  void build_for(const Shape& input_shape);  // builds if not yet built

  // Parameters: own first, then submodules' (prefixed "child_name."), in registration order.
  std::vector<std::pair<std::string, Variable>> named_parameters(bool recurse = true) const;
  std::vector<Variable> parameters(bool recurse = true) const;
  std::vector<Variable> trainable_parameters() const;
  std::vector<Variable> non_trainable_parameters() const;
  std::int64_t count_params() const;
  std::vector<std::pair<std::string, ModuleRef>> named_children() const { return children_; }

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool training() const { return training_; }

  // Name -> value copies; load checks names, shapes and dtypes (strict: no missing/extra names).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  void to(Device device);

  // Penalties from regularisers of this module and its submodules, to add to the loss.
  std::vector<Tensor> regularization_losses() const;

 protected:
  Module();
  Module(const Module&);
  Module& operator=(const Module&) = delete;

  // One-input forward pass; layers override this (or call() for several inputs).
  virtual Tensor forward(const Tensor& x);
  // Creates the parameters for an input shape (batch dim included). Called once.
  virtual void build(const Shape& input_shape) { (void)input_shape; }

  Variable add_weight(const std::string& name, const Shape& shape, const Initializer& init,
                      Fans fans, bool trainable = true, DType dtype = DType::f32);
  Variable add_weight(const std::string& name, const Tensor& value, bool trainable = true);
  void add_regularizer(const Variable& v, const Regularizer& r);
  ModuleRef register_module(const std::string& name, ModuleRef m);

 private:
  std::string name_;
  bool built_ = false;
  bool training_ = true;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, ModuleRef>> children_;
  std::vector<std::pair<Variable, Regularizer>> regularizers_;
};

// "Dense" -> "dense", then "dense_1", "dense_2", ... (process-wide counters, like Keras).
std::string unique_layer_name(const std::string& type_name);

}  // namespace soma::nn
