#pragma once
// nn::Module: the base of every layer and model. Holds named parameters (Variables) and named
// submodules, a train/eval flag, and builds its parameters lazily on the first call, when the
// input shape is known (as Keras layers do).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "soma/device.hpp"
#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/nn/lowering.hpp"
#include "soma/ref.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma {
struct OpDef;
class Attrs;
}  // namespace soma

namespace soma::nn {

class Module;
using ModuleRef = Ref<Module>;
class ConfigVisitor;

// What a layer's forward pass is as one registered op (include/soma/op.hpp) over its input and
// its own weights, for passes that fuse across layers (Sequential's Dense chain). op == nullptr:
// the layer is not one op (the default).
struct OpLowering {
  const OpDef* op = nullptr;
  const Attrs* attrs = nullptr;        // nullptr: they depend on the input (reshape: its shape)
  const Variable* weights[2] = {};     // the op's inputs after the layer's input; nullptr: absent
};

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

  // Keras' `layer.trainable = false`: freezes every weight of this module and its submodules
  // (they count as non-trainable and tapes stop watching them); true gives each weight back the
  // trainability it was created with. Recursive. BatchNormalization runs in inference mode
  // while frozen, as in Keras.
  void set_trainable(bool on);
  bool trainable() const { return trainable_; }

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool training() const { return training_; }

  // Name -> value copies; load checks names, shapes and dtypes (strict: no missing/extra names).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  // Moves every weight (trainable or not: a batch norm's moving statistics too) of this module
  // and its submodules to `device`, keeping the Variables: optimisers and tapes that hold them see
  // the new storage (an optimiser moves its slots along on its next step). Weights created later
  // (a layer built on its first call, a submodule registered afterwards) are created there.
  // Inputs must be on the same device when the module is called (Model::fit/evaluate/predict
  // copy their batches there themselves).
  void to(Device device);
  // Where the weights live (Device::cpu() until to() moves them).
  Device device() const { return device_; }

  // Penalties from regularisers of this module and its submodules, to add to the loss.
  std::vector<Tensor> regularization_losses() const;

  // Describes the layer as ops on `l` (soma/nn/lowering.hpp; ONNX export) from `inputs`, in
  // eval mode; returns its outputs. Default: l.unsupported (no lowering).
  virtual std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs);
  // The dtype the layer's input has when it is fixed (Embedding: indices); nullopt: floating.
  virtual std::optional<DType> input_dtype() const { return std::nullopt; }
  // Lists the layer's config fields, once (soma/nn/config.hpp): model files, layer_config() and
  // layer_from_config() read this list. None by default.
  virtual void visit_config(ConfigVisitor& v) { (void)v; }
  // The op this layer's forward() is (see OpLowering). A subclass that overrides forward() is
  // no longer that op: layers report it only for their own class.
  virtual OpLowering op_lowering() const { return {}; }

 protected:
  Module();
  // A copy is unbuilt (it builds its own weights on its first call) and gets a fresh name unless
  // the source was named with set_name(). Weights and submodules created by build() are left
  // out; those created in the constructor (add_weight / register_module there, the libtorch
  // register_parameter idiom) are kept and shared with the source, so that the Variable members
  // a derived class copies along are the ones the copy trains.
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
  // An empty name uses the submodule's own name().
  ModuleRef register_module(const std::string& name, ModuleRef m);

 private:
  void check_new_param_name(const std::string& name) const;
  Variable push_weight(const std::string& name, const Tensor& value, bool trainable);
  void restore_modes(const std::vector<bool>& modes, std::size_t& i);
  void set_device(Device device);  // recursive; to() moved the weights

  mutable std::string name_;  // assigned on first use: the constructor cannot call type_name()
  bool name_explicit_ = false;
  bool built_ = false;
  bool building_ = false;
  bool training_ = true;
  bool trainable_ = true;
  Device device_ = Device::cpu();
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<bool> created_trainable_;  // parallel to params_: trainability at creation
  std::vector<bool> param_from_build_;   // parallel to params_: created inside build()
  std::vector<std::pair<std::string, ModuleRef>> children_;
  std::vector<bool> child_from_build_;  // parallel to children_: registered inside build()
  std::vector<std::pair<Variable, Regularizer>> regularizers_;
  std::vector<bool> regularizer_from_build_;  // parallel to regularizers_

 public:
  // The activation this module's output ends with ("softmax", "linear", ...), read by
  // nn::output_activation (soma/model/output_activation.hpp); "" when it cannot be told.
  virtual std::string output_activation_name() const { return ""; }
  // True for layers that only move or drop values (Flatten, Reshape, Dropout): their output
  // activation is that of the layer before them.
  virtual bool passes_activation_through() const { return false; }
  // The names of this module's own weights whose values must be >= 0 (a batch norm's moving
  // variance), read by check_weights (soma/model/weight_checks.hpp).
  virtual std::vector<std::string> nonnegative_weights() const { return {}; }
};

// "Dense" -> "dense", then "dense_1", "dense_2", ... (process-wide counters, like Keras).
std::string unique_layer_name(const std::string& type_name);
// Restarts those counters (Keras' clear_session()); names already given are kept.
void reset_layer_name_counters();

}  // namespace soma::nn
