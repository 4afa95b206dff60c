#ifdef SOMA_HAS_ONNX
#include "onnx/onnx_attrs.hpp"

#include <type_traits>

#include "onnx/proto_util.hpp"
#include "soma/error.hpp"

namespace soma::onnx_detail {

using AP = ::onnx::AttributeProto;

const char* attr_type_name(int type) {
  switch (type) {
    case AP::FLOAT: return "FLOAT";
    case AP::INT: return "INT";
    case AP::STRING: return "STRING";
    case AP::TENSOR: return "TENSOR";
    case AP::GRAPH: return "GRAPH";
    case AP::SPARSE_TENSOR: return "SPARSE_TENSOR";
    case AP::TYPE_PROTO: return "TYPE_PROTO";
    case AP::FLOATS: return "FLOATS";
    case AP::INTS: return "INTS";
    case AP::STRINGS: return "STRINGS";
    case AP::TENSORS: return "TENSORS";
    case AP::GRAPHS: return "GRAPHS";
    case AP::SPARSE_TENSORS: return "SPARSE_TENSORS";
    case AP::TYPE_PROTOS: return "TYPE_PROTOS";
    default: return "UNDEFINED";
  }
}

OnnxAttrType attr_type_of(const AP& a) {
  if (a.type() != AP::UNDEFINED) return a.type();
  if (a.has_f()) return AP::FLOAT;
  if (a.has_i()) return AP::INT;
  if (a.has_s()) return AP::STRING;
  if (a.has_t()) return AP::TENSOR;
  if (a.has_g()) return AP::GRAPH;
  if (a.floats_size()) return AP::FLOATS;
  if (a.ints_size()) return AP::INTS;
  if (a.strings_size()) return AP::STRINGS;
  return AP::UNDEFINED;
}

OnnxAttrType onnx_type_of(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> OnnxAttrType {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) return AP::FLOAT;
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return AP::INTS;
        else if constexpr (std::is_same_v<T, std::string>) return AP::STRING;
        else return AP::INT;  // int64, bool, DType
      },
      v);
}

AttrValue attr_from_onnx(const AP& a, const AttrValue* like, const std::string& what) {
  const OnnxAttrType have = attr_type_of(a);
  const OnnxAttrType want =
      like ? onnx_type_of(*like) : (have == AP::UNDEFINED ? AP::INT : have);
  if (have != want && have != AP::UNDEFINED)
    fail("onnx", what, " has type ", attr_type_name(have), ", expected ", attr_type_name(want));
  switch (want) {
    case AP::FLOAT: return double(a.f());
    case AP::INTS: return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
    case AP::STRING: return a.s();
    case AP::INT:
      if (like && std::holds_alternative<bool>(*like)) return a.i() != 0;
      if (like && std::holds_alternative<DType>(*like)) return soma_dtype(int(a.i()), what);
      return std::int64_t(a.i());
    default: break;
  }
  fail("onnx", what, " has type ", attr_type_name(have),
       ", which soma does not convert (INT, FLOAT, INTS or STRING)");
}

void attr_to_onnx(const AttrValue& v, const std::string& name, AP& out) {
  out.Clear();
  out.set_name(name);
  out.set_type(onnx_type_of(v));
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) out.set_f(float(x));
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
          for (auto e : x) out.add_ints(e);
        else if constexpr (std::is_same_v<T, std::string>) out.set_s(x);
        else if constexpr (std::is_same_v<T, DType>) out.set_i(elem_type_of(x));
        else out.set_i(std::int64_t(x));  // int64, bool
      },
      v);
}

}  // namespace soma::onnx_detail
#endif  // SOMA_HAS_ONNX
