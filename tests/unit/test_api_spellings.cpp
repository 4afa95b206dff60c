// The spellings a libtorch / Keras user writes first (issue 19), each used as a user would and
// its result checked. docs/cpp-api.md, "Natural spellings", lists them and the ones that have
// no single meaning.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

std::vector<float> vals(const Tensor& t) { return t.to_vector<float>(); }

// A 3-class classifier and a binary one on 8 samples of 4 features.
nn::Sequential classifier(std::int64_t classes) {
  set_seed(3);
  return nn::Sequential{nn::Input({4}), nn::Dense(classes)};
}
Tensor features() { return random_normal({8, 4}, 0.0, 1.0, DType::f32, 11); }

}  // namespace

// ---- 1. tape.gradient(loss, {w, b}) with Variables ------------------------------------------

TEST(ApiSpellings, GradientOfABraceListOfVariablesReturnsTheGradientsInOrder) {
  Variable w(constant({1.0f, 2.0f}), "w");
  Variable b(constant({0.5f}), "b");
  GradientTape tape;
  Tensor loss = sum(w * 3.0f + b * 5.0f);  // d/dw = 3 each, d/db = 5 per element of w: 10
  auto grads = tape.gradient(loss, {w, b});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(vals(grads[0]), (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(vals(grads[1]), (std::vector<float>{10.0f}));
}

// C++ would take `{w}` as `w` for a single-source overload; the list form wins here, so one
// element returns a list as two do.
TEST(ApiSpellings, GradientOfAOneElementBraceListIsAListToo) {
  Variable w(constant({2.0f, 3.0f}), "w");
  GradientTape tape({.persistent = true});
  Tensor loss = sum(w * w);
  std::vector<Tensor> grads = tape.gradient(loss, {w});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(vals(grads[0]), (std::vector<float>{4.0f, 6.0f}));
  Tensor one = tape.gradient(loss, w);  // no braces: the gradient itself
  EXPECT_EQ(vals(one), (std::vector<float>{4.0f, 6.0f}));
}

TEST(ApiSpellings, GradientOfABraceListMixingTensorsAndVariables) {
  Tensor x = constant({2.0f});
  Variable w(constant({4.0f}), "w");
  GradientTape tape;
  tape.watch(x);
  Tensor loss = sum(x * w);
  auto grads = tape.gradient(loss, {x, w});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(vals(grads[0]), (std::vector<float>{4.0f}));
  EXPECT_EQ(vals(grads[1]), (std::vector<float>{2.0f}));
}

TEST(ApiSpellings, GradientOfABraceListOfTensorsAndOfAVariableVectorStillWork) {
  Tensor x = constant({3.0f}), y = constant({5.0f});
  Variable w(constant({1.0f}), "w");
  GradientTape tape({.persistent = true});
  tape.watch({x, y});
  Tensor loss = sum(x * y * w);
  auto gt = tape.gradient(loss, {x, y});
  ASSERT_EQ(gt.size(), 2u);
  EXPECT_EQ(vals(gt[0]), (std::vector<float>{5.0f}));
  EXPECT_EQ(vals(gt[1]), (std::vector<float>{3.0f}));
  std::vector<Variable> vars{w};
  auto gv = tape.gradient(loss, vars);
  ASSERT_EQ(gv.size(), 1u);
  EXPECT_EQ(vals(gv[0]), (std::vector<float>{15.0f}));
}

// ---- 2. pow with a C++ number ---------------------------------------------------------------

TEST(ApiSpellings, PowOfATensorAndAnIntegerExponentKeepsTheTensorsDtypeAndDifferentiates) {
  Tensor x = constant({1.0f, 2.0f, -3.0f});
  GradientTape tape;
  tape.watch(x);
  Tensor y = soma::pow(x, 3);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(vals(y), (std::vector<float>{1.0f, 8.0f, -27.0f}));
  EXPECT_EQ(vals(tape.gradient(sum(y), x)), (std::vector<float>{3.0f, 12.0f, 27.0f}));
}

TEST(ApiSpellings, PowOfANumberAndATensorTakesTheTensorsDtype) {
  Tensor x = constant({0.0, 1.0, 3.0});  // f64
  GradientTape tape;
  tape.watch(x);
  Tensor y = soma::pow(2.0, x);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1.0, 2.0, 8.0}));
  auto g = tape.gradient(sum(y), x).to_vector<double>();
  EXPECT_NEAR(g[2], 8.0 * std::log(2.0), 1e-12);
}

TEST(ApiSpellings, PowOfAnIntegerTensorAndAWholeExponentStaysInteger) {
  Tensor y = soma::pow(constant({1, 2, 3}), 2);
  EXPECT_EQ(y.dtype(), DType::i32);
  EXPECT_EQ(y.to_vector<int>(), (std::vector<int>{1, 4, 9}));
  EXPECT_EQ(soma::pow(2, constant({0, 3})).to_vector<int>(), (std::vector<int>{1, 8}));
}

TEST(ApiSpellings, PowOfAnIntegerTensorAndAFractionalExponentIsFloat) {
  Tensor y = soma::pow(constant({4, 9}), 0.5);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(vals(y), (std::vector<float>{2.0f, 3.0f}));
  Tensor z = soma::pow(2.5, constant({0, 2}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(vals(z), (std::vector<float>{1.0f, 6.25f}));
}

// ---- 3. Variable w = <tensor expression> ----------------------------------------------------

TEST(ApiSpellings, VariableIsCopyInitialisedFromATensorExpression) {
  Variable w = soma::zeros({2});
  EXPECT_TRUE(w.trainable());
  EXPECT_EQ(w.shape(), (Shape{2}));
  EXPECT_EQ(vals(w), (std::vector<float>{0.0f, 0.0f}));
  Variable v = soma::ones({1}) * 3.0f;
  EXPECT_EQ(vals(v), (std::vector<float>{3.0f}));
}

// A named tensor is copied only when asked (Variable w(t)): passed where a Variable goes it would
// silently become a copy the caller never sees again. `w = tensor` would rebind the handle (not
// write in place): refused, w.assign(t) writes in place.
TEST(ApiSpellings, VariableConvertsImplicitlyOnlyFromTemporariesAndIsNotAssignedFromATensor) {
  static_assert(std::is_convertible_v<Tensor&&, Variable>);
  static_assert(!std::is_convertible_v<const Tensor&, Variable>);
  static_assert(!std::is_convertible_v<Tensor&, Variable>);
  static_assert(std::is_constructible_v<Variable, const Tensor&>);
  static_assert(!std::is_assignable_v<Variable&, Tensor>);
  static_assert(!std::is_assignable_v<Variable&, const Tensor&>);
  static_assert(std::is_assignable_v<Variable&, Variable>);
  Tensor t = constant({1.0f});
  Variable w(t);
  EXPECT_EQ(vals(w), (std::vector<float>{1.0f}));
}

// ---- 4. w -= lr * g -------------------------------------------------------------------------

TEST(ApiSpellings, VariableCompoundAssignmentsUpdateInPlace) {
  Variable w = constant({1.0f, 2.0f});
  Tensor alias = w.value();  // shares storage: in-place writes show through
  Tensor g = constant({2.0f, 4.0f});
  const double lr = 0.5;
  w -= lr * g;
  EXPECT_EQ(vals(alias), (std::vector<float>{0.0f, 0.0f}));
  w += g;
  EXPECT_EQ(vals(alias), (std::vector<float>{2.0f, 4.0f}));
  w *= g;
  EXPECT_EQ(vals(alias), (std::vector<float>{4.0f, 16.0f}));
  w /= g;
  EXPECT_EQ(vals(alias), (std::vector<float>{2.0f, 4.0f}));
  w += 1.0;
  w -= 0.5;
  w *= 2.0;
  w /= 4.0;
  EXPECT_EQ(vals(alias), (std::vector<float>{1.25f, 2.25f}));
}

TEST(ApiSpellings, VariableCompoundAssignmentIsNotRecordedOnATape) {
  Variable w = constant({3.0f});
  GradientTape tape;
  Tensor g = constant({1.0f});
  w -= g;  // an update, as TF's assign_sub: not differentiated
  EXPECT_EQ(tape.num_recorded(), 0u);
  Tensor loss = sum(w * w);
  EXPECT_EQ(vals(tape.gradient(loss, w)), (std::vector<float>{4.0f}));
}

TEST(ApiSpellings, VariableCompoundAssignmentChecksTheShape) {
  Variable w = constant({1.0f, 2.0f});
  try {
    w += constant({1.0f, 2.0f, 3.0f});
    FAIL() << "expected soma::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "Variable.assign_add: value of shape [3] does not fit variable '' of shape [2]");
  }
  Variable never_set;
  try {
    never_set -= 1.0;
    FAIL() << "expected soma::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Variable.assign_sub: the variable was never initialised");
  }
}

TEST(ApiSpellings, TensorCompoundAssignmentRebindsAndIsDifferentiated) {
  Tensor x = constant({3.0f});
  GradientTape tape;
  tape.watch(x);
  Tensor y = x;
  y *= x;       // y = x * x: a new tensor; x is unchanged
  y += 1.0;
  EXPECT_EQ(vals(x), (std::vector<float>{3.0f}));
  EXPECT_EQ(vals(y), (std::vector<float>{10.0f}));
  EXPECT_EQ(vals(tape.gradient(y, x)), (std::vector<float>{6.0f}));
  Tensor t = constant({8.0f});
  t -= 2.0;
  t /= constant({3.0f});
  EXPECT_EQ(vals(t), (std::vector<float>{2.0f}));
}

// ---- 5. compile by names --------------------------------------------------------------------

TEST(ApiSpellings, CompileTakesOptimiserLossAndMetricsByKerasNames) {
  auto m = classifier(3);
  m.compile("sgd", "sparse_categorical_crossentropy", {"accuracy"});
  EXPECT_NE(dynamic_cast<optim::SGD*>(&m.optimizer()), nullptr);
  ASSERT_EQ(m.compiled_losses().size(), 1u);
  EXPECT_NE(dynamic_cast<nn::SparseCategoricalCrossentropy*>(m.compiled_losses()[0].get()),
            nullptr);
  auto ms = m.compiled_metrics();
  ASSERT_EQ(ms.size(), 1u);
  ASSERT_EQ(ms[0].size(), 1u);
  auto* acc = dynamic_cast<metrics::Accuracy*>(ms[0][0].get());
  ASSERT_NE(acc, nullptr);
  EXPECT_EQ(acc->mode(), metrics::AccuracyMode::SparseCategorical);
  Tensor y = constant({0, 1, 2, 0, 1, 2, 0, 1});
  auto logs = m.train_on_batch(features(), y);
  EXPECT_TRUE(logs.count("loss"));
  EXPECT_TRUE(logs.count("accuracy"));
}

TEST(ApiSpellings, CompileByNameResolvesAccuracyForBinaryCrossentropy) {
  auto m = classifier(1);
  m.compile("adam", "binary_crossentropy", {"accuracy"});
  EXPECT_NE(dynamic_cast<optim::Adam*>(&m.optimizer()), nullptr);
  auto* acc = dynamic_cast<metrics::Accuracy*>(m.compiled_metrics()[0][0].get());
  ASSERT_NE(acc, nullptr);
  EXPECT_EQ(acc->mode(), metrics::AccuracyMode::Binary);
}

TEST(ApiSpellings, CompileMixesObjectsAndNames) {
  auto m = classifier(1);
  m.compile(optim::Adam({.learning_rate = 0.25}), "mse");
  EXPECT_DOUBLE_EQ(m.optimizer().learning_rate(), 0.25);
  EXPECT_NE(dynamic_cast<nn::MeanSquaredError*>(m.compiled_losses()[0].get()), nullptr);
  auto m2 = classifier(3);
  m2.compile("rmsprop", nn::SparseCategoricalCrossentropy({.from_logits = true}),
             {metrics::SparseCategoricalAccuracy(), "accuracy"});
  EXPECT_NE(dynamic_cast<optim::RMSprop*>(&m2.optimizer()), nullptr);
  EXPECT_EQ(m2.compiled_metrics()[0].size(), 2u);
  std::vector<metrics::MetricRef> given{metrics::Accuracy()};
  m2.compile(optim::SGD(), nn::SparseCategoricalCrossentropy(), given);  // a vector still works
  EXPECT_EQ(m2.compiled_metrics()[0].size(), 1u);
}

TEST(ApiSpellings, CompileWithAnUnknownNameSaysWhichAndWhatIsKnown) {
  auto m = classifier(1);
  for (auto call : {+[](nn::Sequential& s) { s.compile("sgdd", "mse"); },
                    +[](nn::Sequential& s) { s.compile("sgd", "msee"); },
                    +[](nn::Sequential& s) { s.compile("sgd", "mse", {"acuracy"}); }}) {
    try {
      call(m);
      FAIL() << "expected soma::Error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("compile"), std::string::npos) << msg;
      EXPECT_NE(msg.find("unknown"), std::string::npos) << msg;
    }
  }
  EXPECT_FALSE(m.compiled());
}

// ---- 6. LambdaCallback with designated initialisers -----------------------------------------

TEST(ApiSpellings, LambdaCallbackTakesDesignatedInitialisers) {
  auto m = classifier(1);
  m.compile("sgd", "mse");
  int epochs = 0, batches = 0;
  m.fit(features(), zeros({8, 1}),
        {.epochs = 3, .batch_size = 4,
         .callbacks = {callbacks::LambdaCallback{
             .on_epoch_end_fn = [&](int, nn::Logs&) { ++epochs; },
             .on_train_batch_end_fn = [&](std::int64_t, nn::Logs&) { ++batches; }}},
         .verbose = 0});
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(batches, 6);
}

TEST(ApiSpellings, LambdaCallbackSharedPointerAndValueSpellingsStillWork) {
  auto m = classifier(1);
  m.compile("sgd", "mse");
  int shared_calls = 0, value_calls = 0;
  auto shared = std::make_shared<callbacks::LambdaCallback>();
  shared->on_epoch_end_fn = [&](int, nn::Logs&) { ++shared_calls; };
  callbacks::LambdaCallback by_value;
  by_value.on_train_begin_fn = [&](nn::Logs&) { ++value_calls; };
  m.fit(features(), zeros({8, 1}), {.epochs = 2, .callbacks = {shared, by_value}, .verbose = 0});
  EXPECT_EQ(shared_calls, 2);
  EXPECT_EQ(value_calls, 1);
}
