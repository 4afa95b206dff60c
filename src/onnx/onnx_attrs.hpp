#pragma once
// ONNX attributes <-> soma op attributes (only compiled with SOMA_HAS_ONNX), the conversion
// OpDef::onnx describes (include/soma/op.hpp): INT <-> int64, bool (0/1) or DType
// (TensorProto.DataType); FLOAT <-> double; INTS <-> int list; STRING <-> string. The type of
// the soma side is the type of the attribute's declared default (OpDef::attrs); where an op
// declares none, the ONNX type decides.
#include <string>

#include <onnx/onnx_pb.h>

#include "soma/op.hpp"

namespace soma::onnx_detail {

using OnnxAttrType = ::onnx::AttributeProto::AttributeType;

// "INT", "FLOATS", ... for messages.
const char* attr_type_name(int type);
// The type an attribute carries: its `type` field, or for files that leave it UNDEFINED (early
// IR versions), the value field that is set.
OnnxAttrType attr_type_of(const ::onnx::AttributeProto& a);
// The ONNX type a soma attribute value converts to.
OnnxAttrType onnx_type_of(const AttrValue& v);

// `a` as a soma attribute of the type of `like` (nullptr: by a's own type). `what` names the
// node and attribute in errors, which say the type found and the one expected.
AttrValue attr_from_onnx(const ::onnx::AttributeProto& a, const AttrValue* like,
                         const std::string& what);
// The reverse: `out` gets `name`, the type and the value.
void attr_to_onnx(const AttrValue& v, const std::string& name, ::onnx::AttributeProto& out);

}  // namespace soma::onnx_detail
