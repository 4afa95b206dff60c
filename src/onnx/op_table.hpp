#pragma once
// The ONNX op table: how a registered op becomes one ONNX node, read from its definition
// (OpDef::onnx: op type, attributes renamed and converted by type, opset range). The exporter
// writes every op with a one-to-one mapping through write_node(); the registry-driven test suite
// (tests/ops/test_op_registry_onnx.cpp) builds one-node models with single_op_model().
#include <cstdint>
#include <string>
#include <vector>

#include "soma/op.hpp"

#ifdef SOMA_HAS_ONNX
namespace onnx {
class NodeProto;
}
#endif

namespace soma::onnx::detail {

// A one-node ONNX model for `def` (by its OnnxMapping) with graph inputs of these specs
// ("x0", "x1", ...) and attributes; loads with soma::onnx::load_from_bytes. Throws soma::Error
// without a mapping, outside its opset range, or in a build without ONNX.
std::string single_op_model(const OpDef& def, const std::vector<TensorSpec>& inputs,
                            const Attrs& attrs, std::int64_t opset = 17);

// The ONNX mapping of the op named `op`: its definition's, else the interim table's (mappings
// the definitions do not carry yet); nullptr when it has none.
const OnnxMapping* onnx_mapping_of(const std::string& op);
bool in_opset(const OnnxMapping& m, std::int64_t opset);

#ifdef SOMA_HAS_ONNX
// Fills node `n` (op type and attributes; inputs and outputs are the caller's) for `op` by
// mapping `m`: soma attributes renamed and converted by type (int64 -> INT, double -> FLOAT,
// bool -> INT 0/1, int list -> INTS, DType -> INT TensorProto.DataType, string -> STRING),
// declared defaults (OpDef::attrs) written where `attrs` leaves them out. An attribute the
// mapping does not name, or an opset outside its range, is a soma::Error from `who`.
void write_node(::onnx::NodeProto& n, const std::string& op, const OnnxMapping& m,
                const Attrs& attrs, std::int64_t opset, const char* who);

// One attribute on a node.
void attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v);
void attr(::onnx::NodeProto& n, const std::string& name, double v);
void attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v);
void attr(::onnx::NodeProto& n, const std::string& name, const std::string& v);
void attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v);
#endif

}  // namespace soma::onnx::detail
