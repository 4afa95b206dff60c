#pragma once
// Shared by the ONNX exporter and importer (only compiled with SOMA_HAS_ONNX): conversions
// between soma tensors and ONNX TensorProtos, and attribute helpers. The message classes come
// from Debian's libonnx_proto (onnx-ml.proto, namespace ::onnx).
#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "soma/dtype.hpp"
#include "soma/model/model.hpp"
#include "soma/tensor.hpp"

namespace soma::onnx_detail {

using ElemType = ::onnx::TensorProto_DataType;

// soma dtype -> ONNX element type (f32, f64, f16, i32, i64, i8, u8, bool); others fail.
ElemType elem_type_of(DType dtype);
// ONNX element type -> soma dtype; `what` names the tensor in the error.
DType soma_dtype(int elem_type, const std::string& what);
const char* elem_type_name(int elem_type);

// Fills `tp` (name, dims, data_type, raw_data) with `t` converted to `type`.
void to_proto(const Tensor& t, ElemType type, const std::string& name, ::onnx::TensorProto& tp);
// Reads a TensorProto (raw_data or the typed repeated fields, or ONNX external data: a file
// named by `location`, read from `offset` for `length` bytes, relative to the folder that an
// ExternalDataFolder names; refused outside one, or when the path leaves that folder or the file
// is too short).
Tensor from_proto(const ::onnx::TensorProto& tp);

// Reads the external data of every tensor in a node attribute (Constant's value, ...; onnx's
// save_model moves those out too) into the attribute itself, relative to the current
// ExternalDataFolder: nodes run after load, when no folder is current. Initialisers stay
// external until from_proto reads them once.
void inline_external_attributes(::onnx::GraphProto& g);

// While one is alive, from_proto on this thread reads external data relative to `folder` (the
// folder of the model file that onnx::load opened).
class ExternalDataFolder {
 public:
  explicit ExternalDataFolder(std::string folder);
  ~ExternalDataFolder();
  ExternalDataFolder(const ExternalDataFolder&) = delete;
  ExternalDataFolder& operator=(const ExternalDataFolder&) = delete;

 private:
  std::string saved_;
  bool had_ = false;
};

// When `model` was made by soma::onnx::load: its graph, with the initialisers replaced by the
// weights' current values (so a fine-tuned import exports as the same graph), and true.
// Otherwise false (export walks the layers).
bool export_imported(const nn::Model& model, ::onnx::ModelProto& out);

}  // namespace soma::onnx_detail
