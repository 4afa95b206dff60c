// ONNX control flow and sequences on import (issue 25): If, Loop and Scan run their sub-graphs
// (resolved and checked at load, with the enclosing graph's values in scope); sequences and
// optionals flow between nodes and in and out of the graph through soma::onnx::run. The models
// are protobuf bytes written here by hand (a few fields of onnx.proto): no libonnx, no Python.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"

using namespace soma;
using soma::testing::error_of;

namespace {

// ---- a minimal protobuf writer ----
std::string varint(std::uint64_t v) {
  std::string s;
  do {
    std::uint8_t b = v & 0x7f;
    v >>= 7;
    s += char(b | (v ? 0x80 : 0));
  } while (v);
  return s;
}
std::string key(int field, int wire) { return varint(std::uint64_t(field) << 3 | unsigned(wire)); }
std::string int_field(int field, std::int64_t v) { return key(field, 0) + varint(std::uint64_t(v)); }
std::string bytes_field(int field, const std::string& b) { return key(field, 2) + varint(b.size()) + b; }

// AttributeProto: name 1, i 3, g 6, type 20 (INT 2, GRAPH 5).
std::string attr_int(const std::string& name, std::int64_t v) {
  return bytes_field(1, name) + int_field(3, v) + int_field(20, 2);
}
std::string attr_graph(const std::string& name, const std::string& graph) {
  return bytes_field(1, name) + bytes_field(6, graph) + int_field(20, 5);
}
struct NodeDef {
  std::string op_type;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> attrs = {};
};
// NodeProto: input 1, output 2, name 3, op_type 4, attribute 5.
std::string node(const NodeDef& n) {
  std::string s;
  for (auto& i : n.inputs) s += bytes_field(1, i);
  for (auto& o : n.outputs) s += bytes_field(2, o);
  s += bytes_field(3, n.op_type + "_" + (n.outputs.empty() ? "" : n.outputs[0])) + bytes_field(4, n.op_type);
  for (auto& a : n.attrs) s += bytes_field(5, a);
  return s;
}
// TypeProto: tensor_type 1 (elem_type 1, shape 2 -> dim 1 -> dim_value 1), sequence_type 4
// (elem_type 1: a TypeProto).
std::string tensor_type(int elem, const Shape& shape) {
  std::string sh;
  for (auto d : shape) sh += bytes_field(1, int_field(1, d));
  return bytes_field(1, int_field(1, elem) + bytes_field(2, sh));
}
std::string sequence_type(int elem) { return bytes_field(4, bytes_field(1, bytes_field(1, int_field(1, elem)))); }
struct Value {
  std::string name;
  std::string type;  // an encoded TypeProto, or "" (a sub-graph's untyped value)
};
// ValueInfoProto: name 1, type 2.
std::string value_info(const Value& v) {
  return bytes_field(1, v.name) + (v.type.empty() ? "" : bytes_field(2, v.type));
}
// GraphProto: node 1, name 2, input 11, output 12.
std::string graph(const std::vector<NodeDef>& nodes, const std::vector<Value>& inputs,
                  const std::vector<Value>& outputs) {
  std::string g;
  for (auto& n : nodes) g += bytes_field(1, node(n));
  g += bytes_field(2, "g");
  for (auto& i : inputs) g += bytes_field(11, value_info(i));
  for (auto& o : outputs) g += bytes_field(12, value_info(o));
  return g;
}
// ModelProto: ir_version 1, graph 7, opset_import 8 (version 2).
std::string onnx_model(const std::string& g, int opset = 17) {
  return int_field(1, 8) + bytes_field(7, g) + bytes_field(8, int_field(2, opset));
}
const std::string kF = tensor_type(1, {3});                 // float [3]
const std::string kBool = tensor_type(9, {});               // bool scalar
const std::string kI64 = tensor_type(7, {});                // int64 scalar

Tensor x3() { return constant<float>({1, 2, 3}, Shape{3}); }
Tensor truth(bool b) { return cast(constant<float>({b ? 1.0f : 0.0f}, Shape{}), DType::boolean); }
void expect_values(const Tensor& t, const std::vector<float>& want) {
  auto got = cast(t, DType::f32).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
}

class OnnxControl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  }
};

}  // namespace

TEST_F(OnnxControl, IfRunsTheBranchTheConditionPicksWithOuterValuesInScope) {
  // then: x + x; else: -x (both read the outer x)
  const std::string then_g = graph({{"Add", {"x", "x"}, {"t"}}}, {}, {{"t", ""}});
  const std::string else_g = graph({{"Neg", {"x"}, {"e"}}}, {}, {{"e", ""}});
  auto m = onnx::load_from_bytes(onnx_model(graph(
      {{"If", {"c"}, {"y"}, {attr_graph("then_branch", then_g), attr_graph("else_branch", else_g)}}},
      {{"c", kBool}, {"x", kF}}, {{"y", kF}})));
  expect_values(m->call({truth(true), x3()})[0], {2, 4, 6});
  expect_values(m->call({truth(false), x3()})[0], {-1, -2, -3});
}

TEST_F(OnnxControl, LoopCarriesValuesAndStacksScanOutputs) {
  // body(i, cond, v) -> (cond, v + v, v): three trips double v three times
  const std::string body = graph({{"Identity", {"cond_in"}, {"cond_out"}},
                                  {"Add", {"v_in", "v_in"}, {"v_out"}},
                                  {"Identity", {"v_in"}, {"scan"}}},
                                 {{"i", ""}, {"cond_in", ""}, {"v_in", ""}},
                                 {{"cond_out", ""}, {"v_out", ""}, {"scan", ""}});
  auto m = onnx::load_from_bytes(onnx_model(graph(
      {{"Loop", {"trips", "c", "v"}, {"v_final", "trace"}, {attr_graph("body", body)}}},
      {{"trips", kI64}, {"c", kBool}, {"v", kF}}, {{"v_final", kF}, {"trace", ""}})));
  auto out = m->call({constant<std::int64_t>({3}, Shape{}), truth(true), x3()});
  expect_values(out[0], {8, 16, 24});
  EXPECT_EQ(out[1].shape(), (Shape{3, 3}));
  expect_values(out[1], {1, 2, 3, 2, 4, 6, 4, 8, 12});
  // A false condition runs no trip: v comes back as it went in (a scan output of no trips has
  // no shape to take: an error naming the node).
  const std::string carry = graph({{"Identity", {"cond_in"}, {"cond_out"}}, {"Add", {"v_in", "v_in"}, {"v_out"}}},
                                  {{"i", ""}, {"cond_in", ""}, {"v_in", ""}}, {{"cond_out", ""}, {"v_out", ""}});
  auto m2 = onnx::load_from_bytes(onnx_model(graph(
      {{"Loop", {"trips", "c", "v"}, {"v_final"}, {attr_graph("body", carry)}}},
      {{"trips", kI64}, {"c", kBool}, {"v", kF}}, {{"v_final", kF}})));
  expect_values(m2->call({constant<std::int64_t>({3}, Shape{}), truth(false), x3()})[0], {1, 2, 3});
  std::string msg = error_of([&] { m->call({constant<std::int64_t>({0}, Shape{}), truth(true), x3()}); });
  EXPECT_NE(msg.find("(Loop): a scan output of no iterations"), std::string::npos) << msg;
}

TEST_F(OnnxControl, ScanRunsTheBodyPerPositionForwardAndReverse) {
  // body(s, x_t) -> (s + x_t, s + x_t): running sums of the rows
  const std::string body = graph({{"Add", {"s", "xt"}, {"s_out"}}, {"Identity", {"s_out"}, {"y"}}},
                                 {{"s", ""}, {"xt", ""}}, {{"s_out", ""}, {"y", ""}});
  for (int reverse : {0, 1}) {
    std::vector<std::string> attrs{attr_graph("body", body), attr_int("num_scan_inputs", 1)};
    if (reverse) attrs.push_back(bytes_field(1, "scan_input_directions") + int_field(8, 1) + int_field(20, 7));
    auto m = onnx::load_from_bytes(onnx_model(graph({{"Scan", {"s0", "xs"}, {"s", "ys"}, attrs}},
                                               {{"s0", tensor_type(1, {2})}, {"xs", tensor_type(1, {3, 2})}},
                                               {{"s", ""}, {"ys", ""}})));
    auto out = m->call({constant<float>({0, 0}, Shape{2}), constant<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2})});
    expect_values(out[0], {9, 12});
    if (!reverse) expect_values(out[1], {1, 2, 4, 6, 9, 12});
    else expect_values(out[1], {5, 6, 8, 10, 9, 12});
  }
}

TEST_F(OnnxControl, SequencesFlowBetweenNodesAndThroughRun) {
  // SplitToSequence -> SequenceInsert(at 0) -> (SequenceLength, SequenceAt 1, the sequence)
  auto m = onnx::load_from_bytes(onnx_model(graph(
      {{"SplitToSequence", {"x"}, {"parts"}},
       {"SequenceInsert", {"parts", "extra", "zero"}, {"more"}},
       {"SequenceLength", {"more"}, {"n"}},
       {"SequenceAt", {"more", "one"}, {"second"}}},
      {{"x", kF}, {"extra", tensor_type(1, {})}, {"zero", kI64}, {"one", kI64}},
      {{"n", ""}, {"second", ""}, {"more", sequence_type(1)}})));
  auto out = onnx::run(*m, {x3(), constant<float>({7}, Shape{}), constant<std::int64_t>({0}, Shape{}),
                            constant<std::int64_t>({1}, Shape{})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(cast(out[0].tensor, DType::f64).to_vector<double>().at(0), 4.0);
  expect_values(out[1].tensor, {1});
  ASSERT_TRUE(out[2].is_sequence());
  ASSERT_EQ(out[2].items.size(), 4u);
  expect_values(out[2].items[0], {7});
  // call() gives tensors only, and says so for a sequence output.
  std::string msg = error_of([&] {
    m->call({x3(), constant<float>({7}, Shape{}), constant<std::int64_t>({0}, Shape{}),
             constant<std::int64_t>({1}, Shape{})});
  });
  EXPECT_NE(msg.find("soma::onnx::run"), std::string::npos) << msg;
}

TEST_F(OnnxControl, ASequenceInputRunsThroughRun) {
  auto m = onnx::load_from_bytes(onnx_model(graph({{"ConcatFromSequence", {"seq"}, {"y"}, {attr_int("axis", 0)}}},
                                             {{"seq", sequence_type(1)}}, {{"y", kF}})));
  auto out = onnx::run(*m, {onnx::Value::sequence({x3(), constant<float>({4}, Shape{1})})});
  expect_values(out[0].tensor, {1, 2, 3, 4});
}

TEST_F(OnnxControl, AnUnsupportedOperatorInsideASubGraphFailsAtLoad) {
  const std::string then_g = graph({{"Relx", {"x"}, {"t"}}}, {}, {{"t", ""}});
  const std::string else_g = graph({{"Neg", {"x"}, {"e"}}}, {}, {{"e", ""}});
  std::string msg = error_of([&] {
    onnx::load_from_bytes(onnx_model(graph(
        {{"If", {"c"}, {"y"}, {attr_graph("then_branch", then_g), attr_graph("else_branch", else_g)}}},
        {{"c", kBool}, {"x", kF}}, {{"y", kF}})));
  });
  EXPECT_NE(msg.find("operator 'Relx' is not supported"), std::string::npos) << msg;
}

TEST_F(OnnxControl, AGraphAttributeOfAnOperatorThatTakesNoneFailsAtLoad) {
  const std::string g = graph({{"Neg", {"x"}, {"e"}}}, {}, {{"e", ""}});
  std::string msg = error_of([&] {
    onnx::load_from_bytes(onnx_model(graph({{"Relu", {"x"}, {"y"}, {attr_graph("body", g)}}},
                                      {{"x", kF}}, {{"y", kF}})));
  });
  EXPECT_NE(msg.find("sub-graphs are not supported"), std::string::npos) << msg;
}

// Conv + Relu fusion (issue 24) runs in sub-graphs too, and a Conv whose output a sub-graph reads
// by name is not fused with the Relu after it (the branch must see the Conv's own output).
TEST_F(OnnxControl, ConvReluFusionInsideASubGraphAndNotForAValueASubGraphReads) {
  const std::string k4 = tensor_type(1, {1, 1, 1, 3});
  const std::string kw = tensor_type(1, {1, 1, 1, 1});
  // then: relu(conv(x, w)) computed inside the branch; else: the outer y as it is
  const std::string then_g = graph({{"Conv", {"x", "w"}, {"a"}}, {"Relu", {"a"}, {"t"}}}, {},
                                   {{"t", ""}});
  const std::string else_g = graph({{"Identity", {"y"}, {"e"}}}, {}, {{"e", ""}});
  auto m = onnx::load_from_bytes(onnx_model(graph(
      {{"Conv", {"x", "w"}, {"y"}},
       {"Relu", {"y"}, {"z"}},
       {"If", {"c"}, {"r"}, {attr_graph("then_branch", then_g), attr_graph("else_branch", else_g)}}},
      {{"c", kBool}, {"x", k4}, {"w", kw}}, {{"z", k4}, {"r", k4}})));
  const Tensor x = constant<float>({-1, 2, -3}, Shape{1, 1, 1, 3});
  const Tensor w = constant<float>({2}, Shape{1, 1, 1, 1});
  auto out = m->call({truth(false), x, w});
  expect_values(out[0], {0, 4, 0});
  expect_values(out[1], {-2, 4, -6});  // y itself, not relu(y)
  out = m->call({truth(true), x, w});
  expect_values(out[1], {0, 4, 0});
}
