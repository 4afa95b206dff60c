// Registry-driven ONNX suite: every op whose definition has an ONNX mapping (OpDef::onnx) and a
// test table (OpDef::test) is written as a one-node ONNX model by the generic export path
// (src/onnx/op_table.hpp), loaded back with soma::onnx::load_from_bytes and run; its outputs
// must equal the eager op's. A new op gets this test by being registered with both filled in.
// An op that does not import is a failure naming it, never a skip.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../src/onnx/op_table.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

std::vector<std::string> mapped_ops() {
  std::vector<std::string> names;
  for (const OpDef* d : all_ops())
    if (!d->onnx.op_type.empty() && !d->test.shapes.empty()) names.push_back(d->name);
  return names;
}

std::uint64_t seed_of(const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: a fixed seed per op
  for (char c : name) h = (h ^ std::uint8_t(c)) * 1099511628211ull;
  return h;
}

class OpRegistryOnnx : public ::testing::TestWithParam<std::string> {};

TEST_P(OpRegistryOnnx, OneNodeModelLoadsAndMatchesTheEagerOp) {
  if (!soma::onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  const OpDef& def = get_op(GetParam());
  std::vector<Tensor> inputs;
  std::vector<TensorSpec> specs;
  std::uint64_t seed = seed_of(def.name);
  for (std::size_t i = 0; i < def.test.shapes.size(); ++i) {
    const Shape& s = def.test.shapes[i];
    const TestInputSpec* fixed = nullptr;  // indices, conditions: integers in their own dtype
    for (const auto& f : def.test.fixed_inputs)
      if (std::size_t(f.input) == i) fixed = &f;
    if (fixed) {
      Tensor u = floor(soma::testing::rand_tensor(s, seed++, fixed->lo, fixed->hi + 0.999, DType::f64));
      Tensor t = fixed->dtype == DType::boolean ? u > 0.0 : u.cast(fixed->dtype);
      inputs.push_back(t);
      specs.push_back({s, t.dtype()});
      continue;
    }
    inputs.push_back(soma::testing::rand_tensor(s, seed++, def.test.lo, def.test.hi, DType::f32));
    specs.push_back({s, DType::f32});
  }
  std::vector<Tensor> expected = call_op(def, inputs, def.test.attrs);
  std::string bytes;
  std::shared_ptr<nn::Model> model;
  std::vector<Tensor> actual;
  std::string error = soma::testing::error_of([&] {
    bytes = soma::onnx::detail::single_op_model(def, specs, def.test.attrs);
    model = soma::onnx::load_from_bytes(bytes);
    model->eval();
    actual = model->call(inputs);
  });
  ASSERT_EQ(error, soma::testing::kNoError)
      << def.name << " (ONNX " << def.onnx.op_type << "): " << error;
  ASSERT_EQ(actual.size(), expected.size()) << def.name;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i].dtype(), expected[i].dtype()) << def.name << " output " << i;
    EXPECT_TRUE(soma::testing::all_close(actual[i].cast(DType::f64), expected[i].cast(DType::f64),
                                         1e-6, 1e-5))
        << def.name << " output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpRegistryOnnx, ::testing::ValuesIn(mapped_ops()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpRegistryOnnx);

// The generic path refuses an op without a mapping, naming it.
TEST(OpRegistryOnnx, AnOpWithoutAMappingIsAnErrorNamingIt) {
  const OpDef* unmapped = nullptr;
  for (const OpDef* d : all_ops())
    if (d->onnx.op_type.empty()) unmapped = d;
  ASSERT_NE(unmapped, nullptr);
  std::string msg = soma::testing::error_of(
      [&] { soma::onnx::detail::single_op_model(*unmapped, {}, {}); });
  EXPECT_NE(msg.find("'" + unmapped->name + "'"), std::string::npos) << msg;
}

}  // namespace
