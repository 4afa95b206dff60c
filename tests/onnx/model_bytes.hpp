#pragma once
// A minimal protobuf writer for ONNX ModelProtos (a few fields of onnx.proto), so that ONNX
// import tests need neither libonnx nor Python. (The same writer as test_onnx_import_table.cpp.)
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "soma/shape.hpp"

namespace soma::onnx_test {

inline std::string varint(std::uint64_t v) {
  std::string s;
  do {
    std::uint8_t b = v & 0x7f;
    v >>= 7;
    s += char(b | (v ? 0x80 : 0));
  } while (v);
  return s;
}
inline std::string key(int field, int wire) {
  return varint(std::uint64_t(field) << 3 | unsigned(wire));
}
inline std::string int_field(int field, std::int64_t v) {
  return key(field, 0) + varint(std::uint64_t(v));
}
inline std::string bytes_field(int field, const std::string& b) {
  return key(field, 2) + varint(b.size()) + b;
}
inline std::string float_field(int field, float f) {
  std::string s = key(field, 5);
  char b[4];
  std::memcpy(b, &f, 4);
  return s + std::string(b, 4);
}

// AttributeProto: name 1, f 2, i 3, s 4, ints 8, type 20 (FLOAT 1, INT 2, STRING 3, INTS 7).
inline std::string attr_int(const std::string& name, std::int64_t v) {
  return bytes_field(1, name) + int_field(3, v) + int_field(20, 2);
}
inline std::string attr_float(const std::string& name, float v) {
  return bytes_field(1, name) + float_field(2, v) + int_field(20, 1);
}
inline std::string attr_string(const std::string& name, const std::string& v) {
  return bytes_field(1, name) + bytes_field(4, v) + int_field(20, 3);
}
inline std::string attr_ints(const std::string& name, const std::vector<std::int64_t>& v) {
  std::string s = bytes_field(1, name);
  for (auto e : v) s += int_field(8, e);
  return s + int_field(20, 7);
}

struct NodeDef {
  std::string op_type;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> attrs;  // encoded AttributeProtos
  std::string name = "n";
};
// NodeProto: input 1, output 2, name 3, op_type 4, attribute 5.
inline std::string node(const NodeDef& n) {
  std::string s;
  for (auto& i : n.inputs) s += bytes_field(1, i);
  for (auto& o : n.outputs) s += bytes_field(2, o);
  s += bytes_field(3, n.name) + bytes_field(4, n.op_type);
  for (auto& a : n.attrs) s += bytes_field(5, a);
  return s;
}
// ValueInfoProto (name 1, type 2) -> TypeProto.tensor_type 1 -> elem_type 1, shape 2 -> dim 1
// -> dim_value 1.
inline std::string value_info(const std::string& name, const Shape& shape, int elem_type) {
  std::string sh;
  for (auto d : shape) sh += bytes_field(1, int_field(1, d));
  std::string tensor = int_field(1, elem_type) + bytes_field(2, sh);
  return bytes_field(1, name) + bytes_field(2, bytes_field(1, tensor));
}
// ONNX element types used here.
enum Elem { kFloat = 1, kInt32 = 6, kInt64 = 7, kBool = 9 };
struct Input {
  std::string name;
  Shape shape;
  int elem_type = kFloat;
};
// ModelProto: ir_version 1, graph 7, opset_import 8 (version 2). GraphProto: node 1, name 2,
// input 11, output 12.
inline std::string onnx_model(const std::vector<NodeDef>& nodes, const std::vector<Input>& inputs,
                              const std::string& output, int opset = 17) {
  std::string g;
  for (auto& n : nodes) g += bytes_field(1, node(n));
  g += bytes_field(2, "g");
  for (auto& i : inputs) g += bytes_field(11, value_info(i.name, i.shape, i.elem_type));
  g += bytes_field(12, bytes_field(1, output));
  return int_field(1, 8) + bytes_field(7, g) + bytes_field(8, int_field(2, opset));
}

}  // namespace soma::onnx_test
