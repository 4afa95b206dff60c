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
// ONNX element type -> soma dtype; `what` names the tensor in the error. The narrow integer
// types (INT4, UINT4, INT2, UINT2) are held in i8 / u8 at import: exact through Cast only (the
// importer refuses them anywhere else).
DType soma_dtype(int elem_type, const std::string& what);
// The bits of a narrow integer element type (4 or 2), 0 for any other; `is_signed` set for INT4
// and INT2. ONNX numbers them 21 (UINT4), 22 (INT4), 25 (UINT2), 26 (INT2): newer than the
// onnx.proto soma may be built with.
int narrow_int_bits(int elem_type, bool* is_signed = nullptr);
// The FLOAT8 types (17 FLOAT8E4M3FN, 18 FLOAT8E4M3FNUZ, 19 FLOAT8E5M2, 20 FLOAT8E5M2FNUZ) and
// FLOAT4E2M1 (23) are held in f32 at import, through Cast only (their values are exact in f32).
bool is_narrow_float(int elem_type);
// v rounded to such a type, half to even; past its largest finite value: that value
// (saturate), else inf where the type has one and NaN where not (ONNX Cast's rules). The FNUZ
// types have no -0; FLOAT4E2M1 has neither inf nor NaN: it saturates, NaN gives -0.
double round_to_narrow_float(double v, int elem_type, bool saturate);
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
