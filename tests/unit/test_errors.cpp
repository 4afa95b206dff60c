// The error cases the core promises: each bad call throws soma::Error naming the op, the
// shapes/dtypes involved and what was expected. No crash, no silent garbage.
#include "test_support.hpp"

using namespace soma;

namespace {
// Runs f, expects a soma::Error, and returns its message ("" if none was thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a soma::Error: ") + e.what();
  }
  return "";
}
#define EXPECT_CONTAINS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: '" << (msg) << "' lacks '" << (part) << "'"
}  // namespace

TEST(Errors, BroadcastingMismatchNamesOpAndBothShapes) {
  std::string m = error_of([] { add(zeros({5, 3, 2}), zeros({5, 2})); });
  EXPECT_EQ(m, "add: cannot broadcast [5, 3, 2] with [5, 2]: dimension -2 is 3 vs 5");
}

TEST(Errors, MatmulInnerDimensions) {
  std::string m = error_of([] { matmul(zeros({32, 784}), zeros({128, 10})); });
  EXPECT_EQ(m, "matmul: inner dimensions differ: [32, 784] x [128, 10]");
}

TEST(Errors, BadReshapeSize) {
  std::string m = error_of([] { reshape(zeros({2, 3}), {4, 2}); });
  EXPECT_CONTAINS(m, "reshape");
  EXPECT_CONTAINS(m, "[2, 3]");
  EXPECT_CONTAINS(m, "[4, 2]");
  EXPECT_CONTAINS(error_of([] { reshape(zeros({2, 3}), {-1, -1}); }), "only one dimension may be -1");
  EXPECT_CONTAINS(error_of([] { reshape(zeros({2, 3}), {-1, 4}); }), "cannot reshape [2, 3]");
}

TEST(Errors, AxisOutOfRange) {
  std::string m = error_of([] { sum(zeros({2, 3}), {2}); });
  EXPECT_CONTAINS(m, "sum");
  EXPECT_CONTAINS(m, "axis 2");
  EXPECT_CONTAINS(m, "[2, 3]");
  EXPECT_CONTAINS(error_of([] { softmax(zeros({2, 3}), -3); }), "softmax");
  EXPECT_CONTAINS(error_of([] { concat({zeros({2}), zeros({2})}, 1); }), "concat");
  EXPECT_CONTAINS(error_of([] { expand_dims(zeros({2}), 3); }), "expand_dims");
  EXPECT_CONTAINS(error_of([] { zeros({2, 3}).dim(5); }), "axis 5");
}

TEST(Errors, DTypeNotSupportedByOp) {
  std::string m = error_of([] { log(constant({1, 2})); });
  EXPECT_EQ(m, "log: dtype i32 is not supported (expected f32, f64, f16 or bf16)");
  EXPECT_CONTAINS(error_of([] { matmul(constant({{true}}), constant({{true}})); }), "matmul");
  EXPECT_CONTAINS(error_of([] { mean(constant({1, 2})); }), "mean");
  EXPECT_CONTAINS(error_of([] { constant({1.0f}).data<double>(); }), "f32");
}

TEST(Errors, GradientFromUsedNonPersistentTape) {
  Tensor x = constant(1.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x;
  tape.gradient(y, x);
  EXPECT_CONTAINS(error_of([&] { tape.gradient(y, x); }), "non-persistent");
}

TEST(Errors, UndefinedTensorHandle) {
  EXPECT_CONTAINS(error_of([] { Tensor t; t.shape(); }), "undefined");
  EXPECT_CONTAINS(error_of([] { add(Tensor(), constant(1.0)); }), "undefined");
}

TEST(Errors, ItemOfManyElements) {
  EXPECT_CONTAINS(error_of([] { zeros({2, 2}).item<float>(); }), "item");
}

TEST(Errors, ElementAccessOutOfRange) {
  std::string m = error_of([] { zeros({2, 3}).at<float>({0, 3}); });
  EXPECT_CONTAINS(m, "at");
  EXPECT_CONTAINS(m, "[2, 3]");
}

TEST(Errors, NegativeShape) {
  EXPECT_CONTAINS(error_of([] { zeros({2, -1}); }), "negative dimension");
}

TEST(Errors, HugeAllocationIsAnErrorNotAnAbort) {
  EXPECT_CONTAINS(error_of([] { zeros({1 << 30, 1 << 30}); }), "too large");
}

TEST(Errors, UnknownOpName) {
  EXPECT_CONTAINS(error_of([] { get_op("no_such_op"); }), "no_such_op");
}
