// The ONNX op table (op_table.hpp): one registered op -> one ONNX node, by its definition.
#include "onnx/op_table.hpp"

#include <algorithm>
#include <type_traits>

#include "soma/error.hpp"

#ifdef SOMA_HAS_ONNX
#include "onnx/proto_util.hpp"
#endif

namespace soma::onnx::detail {

namespace {

const OpDef* find_def(const std::string& op) {
  for (const OpDef* d : all_ops())
    if (d->name == op) return d;
  return nullptr;
}

}  // namespace

const OnnxMapping* onnx_mapping_of(const std::string& op) {
  if (const OpDef* d = find_def(op); d && !d->onnx.op_type.empty()) return &d->onnx;
  return nullptr;
}

bool in_opset(const OnnxMapping& m, std::int64_t opset) {
  return opset >= m.min_opset && (m.max_opset == 0 || opset <= m.max_opset);
}

#ifndef SOMA_HAS_ONNX

std::string single_op_model(const OpDef& def, const std::vector<TensorSpec>&, const Attrs&,
                            std::int64_t) {
  fail("onnx::single_op_model", "op '", def.name,
       "': soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}

#else

using namespace soma::onnx_detail;
using AP = ::onnx::AttributeProto;

void attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::INT);
  a->set_i(v);
}
void attr(::onnx::NodeProto& n, const std::string& name, double v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::FLOAT);
  a->set_f(float(v));
}
void attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::INTS);
  for (auto e : v) a->add_ints(e);
}
void attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::STRING);
  a->set_s(v);
}
void attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::STRINGS);
  for (auto& e : v) a->add_strings(e);
}

namespace {
// A soma attribute value as an ONNX attribute, converted by its type.
void attr_value(::onnx::NodeProto& n, const std::string& name, const AttrValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) attr(n, name, std::int64_t(x ? 1 : 0));
        else if constexpr (std::is_same_v<T, DType>) attr(n, name, std::int64_t(elem_type_of(x)));
        else attr(n, name, x);
      },
      v);
}

const AttrValue* find_attr(const Attrs& a, const std::string& key) {
  for (auto& [k, v] : a.items())
    if (k == key) return &v;
  return nullptr;
}
}  // namespace

void write_node(::onnx::NodeProto& n, const std::string& op, const OnnxMapping& m,
                const Attrs& attrs, std::int64_t opset, const char* who) {
  if (!in_opset(m, opset))
    fail(who, "op '", op, "' maps to ONNX ", m.op_type, " in opsets ", m.min_opset, " to ",
         m.max_opset ? std::to_string(m.max_opset) : std::string("now"), ", not opset ", opset);
  n.set_op_type(m.op_type);
  for (const auto& item : attrs.items()) {  // (no structured binding: clang 14 cannot capture one)
    const std::string& k = item.first;
    if (std::none_of(m.attrs.begin(), m.attrs.end(),
                     [&](const OnnxAttr& a) { return a.soma == k; }))
      fail(who, "op '", op, "': attribute '", k, "' has no counterpart in ONNX ", m.op_type);
  }
  const OpDef* def = find_def(op);
  for (const OnnxAttr& a : m.attrs) {
    const AttrValue* v = find_attr(attrs, a.soma);
    if (!v && def)
      for (const AttrSpec& s : def->attrs)
        if (s.name == a.soma) v = &s.default_value;
    if (v) attr_value(n, a.onnx, *v);
  }
}

std::string single_op_model(const OpDef& def, const std::vector<TensorSpec>& inputs,
                            const Attrs& attrs, std::int64_t opset) {
  constexpr const char* kWho = "onnx::single_op_model";
  if (def.onnx.op_type.empty())
    fail(kWho, "op '", def.name, "' has no ONNX mapping (OpDef::onnx.op_type is empty)");
  if (!def.infer) fail(kWho, "op '", def.name, "' has no shape rule");
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("soma");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  auto& g = *m.mutable_graph();
  g.set_name(def.name);
  auto value_info = [](::onnx::ValueInfoProto& vi, const std::string& name, const TensorSpec& s) {
    vi.set_name(name);
    auto* tt = vi.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type_of(s.dtype));
    auto* sh = tt->mutable_shape();
    for (auto e : s.shape) sh->add_dim()->set_dim_value(e);
  };
  auto& n = *g.add_node();
  n.set_name(def.name + "/" + def.onnx.op_type);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "x" + std::to_string(i);
    value_info(*g.add_input(), name, inputs[i]);
    n.add_input(name);
  }
  write_node(n, def.name, def.onnx, attrs, opset, kWho);
  const auto outs = def.infer(inputs, attrs);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    std::string name = outs.size() == 1 ? "y" : "y" + std::to_string(i);
    n.add_output(name);
    value_info(*g.add_output(), name, outs[i]);
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes))
    fail(kWho, "could not serialise the model of op '", def.name, "'");
  return bytes;
}

#endif  // SOMA_HAS_ONNX

}  // namespace soma::onnx::detail
