#pragma once
// ONNX export and import (docs/onnx.md).
//
//   soma::onnx::export_model(model, "mlp.onnx", {.opset = 17});
//   auto m = soma::onnx::load("resnet.onnx");   // an nn::Model: predict, compile, fit
//
// Export writes a Sequential or functional model as standard ONNX operators (inference graph:
// Dropout is the identity, BatchNormalization uses its moving statistics), with a dynamic batch
// dimension. Import builds a model that interprets the ONNX graph with soma ops: floating-point
// initialisers become trainable weights (BatchNormalization statistics non-trainable ones), so
// the model can be fine-tuned with compile/fit or a GradientTape.
//
// ONNX support is optional at build time (Debian's libonnx-dev + libprotobuf-dev); in a build
// without it, both functions throw a soma::Error saying so.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "soma/model/model.hpp"

namespace soma::onnx {

struct ExportOptions {
  // Operator set of the default domain, 11 to 21. Below 17, LayerNormalization is composed
  // from ReduceMean/Sub/Mul/Sqrt/Div; below 13, Softmax is only exported over the last axis.
  std::int64_t opset = 17;
  std::string producer_name = "soma";
  std::string graph_name;                 // default: the model's name
  std::vector<std::string> input_names;   // default "input" ("input_1", ... for several)
  std::vector<std::string> output_names;  // default "output" ("output_1", ...)
};

// Writes `model` to `path`. The model must be built (its input shape known: an nn::Input, a
// first call or build_for). Throws soma::Error naming the layer for a layer or option with no
// ONNX mapping.
void export_model(nn::Model& model, const std::string& path, const ExportOptions& options = {});
// The same, returning the serialised ModelProto bytes.
std::string export_to_bytes(nn::Model& model, const ExportOptions& options = {});

struct LoadOptions {
  // false: every weight is created non-trainable (inference only).
  bool trainable = true;
};

// Builds a runnable, trainable model from an ONNX file. The model's inputs and outputs are the
// graph's, in order (call it with one tensor, or with a vector for several inputs). An operator
// that soma cannot run is an error naming the operator and its node.
std::shared_ptr<nn::Model> load(const std::string& path, const LoadOptions& options = {});
std::shared_ptr<nn::Model> load_from_bytes(const std::string& bytes, const LoadOptions& options = {});

// The shapes a file declares for its graph inputs (initialisers left out), in order: -1 for a
// symbolic or unknown dimension, an empty shape for an unknown rank. For tools that must make
// inputs (soma predict).
std::vector<Shape> input_shapes(const std::string& path);

// A graph input or output of any ONNX kind: a tensor, a sequence of tensors, or an empty optional
// (an optional holding a value is that value). A tensor converts implicitly.
struct Value {
  enum class Kind { tensor, sequence, none };
  Kind kind = Kind::none;
  Tensor tensor;              // kind tensor
  std::vector<Tensor> items;  // kind sequence
  Value() = default;
  Value(Tensor t) : kind(t.defined() ? Kind::tensor : Kind::none), tensor(std::move(t)) {}  // NOLINT
  static Value sequence(std::vector<Tensor> items) {
    Value v;
    v.kind = Kind::sequence;
    v.items = std::move(items);
    return v;
  }
  bool is_tensor() const { return kind == Kind::tensor; }
  bool is_sequence() const { return kind == Kind::sequence; }
};
// Runs a model made by load() on values of any kind (nn::Model::call takes tensors only, so a
// graph with sequence or optional inputs or outputs runs through this); other models throw.
std::vector<Value> run(nn::Model& model, const std::vector<Value>& inputs);

// Whether this build of soma has ONNX support.
bool available();

}  // namespace soma::onnx
