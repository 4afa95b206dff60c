// Metrics: values hand-computed over two batches, accumulated and then reset; sample weights;
// top-k ties; precision/recall with no positives; the Accuracy resolution rules; no tape
// recording; error messages.
#include <string>
#include <vector>

#include "soma/metrics.hpp"
#include "soma/nn/losses.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

using soma::testing::error_of;

Tensor labels(std::vector<std::int64_t> v) {
  std::int64_t n = std::int64_t(v.size());
  return constant(v, {n});
}

}  // namespace

// ---- sparse categorical / categorical accuracy -------------------------------------------------

TEST(SparseCategoricalAccuracy, AccumulatesOverBatchesAndResets) {
  metrics::SparseCategoricalAccuracy m;
  EXPECT_EQ(m.name(), "sparse_categorical_accuracy");
  EXPECT_EQ(m.result(), 0.0);
  // batch 1: argmax = 1, 0, 2 vs labels 1, 2, 2 -> 2 of 3
  m.update_state(labels({1, 2, 2}),
                 constant({{0.1f, 0.8f, 0.1f}, {0.6f, 0.3f, 0.1f}, {0.2f, 0.3f, 0.5f}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
  // batch 2 ([batch, 1] labels): argmax = 0 vs 1 -> 0 of 1
  m.update_state(constant(std::vector<std::int32_t>{1}, {1, 1}), constant({{0.9f, 0.05f, 0.05f}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 4);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
  m.update_state(labels({0}), constant({{0.9f, 0.1f}}));
  EXPECT_DOUBLE_EQ(m.result(), 1.0);
}

TEST(SparseCategoricalAccuracy, SampleWeightsWeighEachSample) {
  metrics::SparseCategoricalAccuracy m;
  // hits: 1, 0, 1 with weights 0.5, 2, 1.5 -> 2 / 4
  m.update_state(labels({0, 0, 1}), constant({{0.9, 0.1}, {0.2, 0.8}, {0.3, 0.7}}),
                 constant({0.5, 2.0, 1.5}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 4.0);
  // a second batch adds hits 1 (w 4) -> 6 / 8
  m.update_state(labels({1}), constant({{0.0, 1.0}}), constant({4.0}));
  EXPECT_DOUBLE_EQ(m.result(), 6.0 / 8.0);
}

TEST(CategoricalAccuracy, ComparesArgmaxOfTargetsAndPredictions) {
  metrics::CategoricalAccuracy m;
  EXPECT_EQ(m.name(), "categorical_accuracy");
  m.update_state(constant({{0, 0, 1}, {0, 1, 0}}), constant({{0.1, 0.2, 0.7}, {0.5, 0.4, 0.1}}));
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
  m.update_state(constant({{1, 0, 0}}), constant({{0.5, 0.4, 0.1}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(CategoricalAccuracy, TiedPredictionsGoToTheFirstIndex) {
  metrics::CategoricalAccuracy m;
  m.update_state(constant({{1, 0}, {0, 1}}), constant({{0.5, 0.5}, {0.5, 0.5}}));
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
}

TEST(CategoricalAccuracy, ShapeMismatchNamesTheMetricAndBothShapes) {
  metrics::CategoricalAccuracy m;
  std::string msg = error_of([&] { m.update_state(labels({1, 0}), zeros({2, 3})); });
  EXPECT_NE(msg.find("categorical_accuracy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
}

// ---- binary accuracy
// -----------------------------------------------------------------------------

TEST(BinaryAccuracy, ThresholdsPredictionsAtOneHalfByDefault) {
  metrics::BinaryAccuracy m;
  EXPECT_EQ(m.name(), "binary_accuracy");
  // predictions 1, 0, 0 (0.5 is not > 0.5), 1 vs 1, 0, 1, 0 -> 2 / 4
  m.update_state(constant({{1.0}, {0.0}, {1.0}, {0.0}}), constant({{0.9}, {0.2}, {0.5}, {0.7}}));
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
  // batch 2 with [batch] targets: 1 of 2
  m.update_state(constant({1.0, 1.0}), constant({{0.6}, {0.1}}));
  EXPECT_DOUBLE_EQ(m.result(), 3.0 / 6);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(BinaryAccuracy, CustomThresholdAndMultiLabelRowsAveragePerSample) {
  metrics::BinaryAccuracy m({.threshold = 0.8});
  // row 0: preds 1, 0 vs 1, 1 -> 0.5; row 1: preds 0, 0 vs 0, 0 -> 1 ; weights 3, 1
  m.update_state(constant({{1.0, 1.0}, {0.0, 0.0}}), constant({{0.9, 0.7}, {0.1, 0.8}}),
                 constant({3.0, 1.0}));
  EXPECT_DOUBLE_EQ(m.result(), (3 * 0.5 + 1 * 1.0) / 4);
}

// ---- Accuracy (Keras' "accuracy")
// ----------------------------------------------------------------

TEST(Accuracy, ResolvesToSparseCategoricalForIntegerLabels) {
  metrics::Accuracy m;
  EXPECT_EQ(m.name(), "accuracy");
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::Auto);
  m.update_state(labels({2, 0}), constant({{0.1f, 0.2f, 0.7f}, {0.1f, 0.8f, 0.1f}}));
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::SparseCategorical);
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
  m.update_state(labels({1}), constant({{0.1f, 0.8f, 0.1f}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::SparseCategorical);
}

TEST(Accuracy, ResolvesToCategoricalForOneHotTargets) {
  metrics::Accuracy m;
  m.update_state(constant({{0.0, 1.0}, {1.0, 0.0}}), constant({{0.3, 0.7}, {0.4, 0.6}}));
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::Categorical);
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
}

TEST(Accuracy, ResolvesToBinaryForOneOutputUnit) {
  metrics::Accuracy m;
  m.update_state(constant({1, 0, 1}), constant({{0.7}, {0.6}, {0.9}}));
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::Binary);
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
}

TEST(Accuracy, IntegerPredictionsAreComparedExactly) {
  metrics::Accuracy m;
  m.update_state(constant({1, 2, 3, 4}), constant({0, 2, 3, 4}));
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::Exact);
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
  metrics::Accuracy exact({.mode = metrics::AccuracyMode::Exact});
  exact.update_state(constant({{1.0}, {2.0}}), constant({{1.0}, {0.6}}));
  EXPECT_DOUBLE_EQ(exact.result(), 0.5);
}

TEST(Accuracy, ResolveForLossPinsTheVariant) {
  metrics::Accuracy m;
  m.resolve_for_loss(nn::BinaryCrossentropy());
  EXPECT_EQ(m.mode(), metrics::AccuracyMode::Binary);
  // multi-label targets of y_pred's shape are then scored elementwise, not by argmax
  m.update_state(constant({{1.0, 1.0}}), constant({{0.9, 0.8}}));
  EXPECT_DOUBLE_EQ(m.result(), 1.0);
  metrics::Accuracy s;
  s.resolve_for_loss(nn::SparseCategoricalCrossentropy());
  EXPECT_EQ(s.mode(), metrics::AccuracyMode::SparseCategorical);
  metrics::Accuracy r;
  r.resolve_for_loss(nn::MeanSquaredError());
  EXPECT_EQ(r.mode(), metrics::AccuracyMode::Auto);
}

TEST(Accuracy, UnrelatedShapesAreAnError) {
  metrics::Accuracy m;
  std::string msg = error_of([&] { m.update_state(labels({1, 0, 1}), zeros({2, 4})); });
  EXPECT_NE(msg.find("accuracy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 4]"), std::string::npos) << msg;
}

// ---- top-k -------------------------------------------------------------------------------------

TEST(TopKCategoricalAccuracy, CountsTargetsAmongTheKBestScores) {
  metrics::TopKCategoricalAccuracy m({.k = 2});
  EXPECT_EQ(m.name(), "top_k_categorical_accuracy");
  // scores: row 0 target 2 is 2nd best -> hit; row 1 target 0 is 3rd -> miss
  m.update_state(constant({{0, 0, 1}, {1, 0, 0}}), constant({{0.5, 0.1, 0.4}, {0.1, 0.6, 0.3}}));
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
  m.update_state(constant({{0, 1, 0}}), constant({{0.2, 0.7, 0.1}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(TopKCategoricalAccuracy, DefaultKIsFive) {
  metrics::TopKCategoricalAccuracy m;
  // target is 5th of 6 -> hit; 6th of 6 -> miss
  Tensor scores = constant({{0.6, 0.5, 0.4, 0.3, 0.2, 0.1}, {0.6, 0.5, 0.4, 0.3, 0.2, 0.1}});
  m.update_state(constant({{0, 0, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 1}}), scores);
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
}

// Ties at the k-th place count as hits (tf.math.in_top_k): fewer than k strictly better scores.
TEST(SparseTopKCategoricalAccuracy, TiesAtTheBoundaryCountAsHits) {
  metrics::SparseTopKCategoricalAccuracy m({.k = 1});
  EXPECT_EQ(m.name(), "sparse_top_k_categorical_accuracy");
  Tensor scores = constant({{0.4, 0.4, 0.2}, {0.4, 0.4, 0.2}, {0.4, 0.4, 0.2}});
  m.update_state(labels({0, 1, 2}), scores);
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3);
}

TEST(SparseTopKCategoricalAccuracy, AccumulatesWeightedBatches) {
  metrics::SparseTopKCategoricalAccuracy m({.k = 2});
  // row 0: label 1 is 2nd -> hit (w 1); row 1: label 2 is 3rd -> miss (w 3)
  m.update_state(labels({1, 2}), constant({{0.5, 0.3, 0.2}, {0.5, 0.3, 0.2}}),
                 constant({1.0, 3.0}));
  EXPECT_DOUBLE_EQ(m.result(), 0.25);
  m.update_state(constant(std::vector<std::int64_t>{0}, {1, 1}), constant({{0.9, 0.05, 0.05}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 5);
}

TEST(TopKCategoricalAccuracy, KBelowOneIsRejected) {
  std::string msg = error_of([] { metrics::TopKCategoricalAccuracy({.k = 0}); });
  EXPECT_NE(msg.find("top_k_categorical_accuracy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("k must be at least 1"), std::string::npos) << msg;
}

// ---- precision / recall
// --------------------------------------------------------------------------

TEST(PrecisionRecall, CountOverTwoBatchesThenReset) {
  metrics::Precision p;
  metrics::Recall r;
  EXPECT_EQ(p.name(), "precision");
  EXPECT_EQ(r.name(), "recall");
  // batch 1: preds 1 1 0 0 vs 1 0 1 0 -> tp 1, fp 1, fn 1
  Tensor t1 = constant({{1.0}, {0.0}, {1.0}, {0.0}}), p1 = constant({{0.9}, {0.6}, {0.4}, {0.1}});
  // batch 2: preds 1 1 0 vs 1 1 1 -> tp 2, fn 1
  Tensor t2 = constant({1, 1, 1}), p2 = constant({{0.7}, {0.51}, {0.5}});
  for (metrics::Metric* m : std::vector<metrics::Metric*>{&p, &r}) {
    m->update_state(t1, p1);
    m->update_state(t2, p2);
  }
  EXPECT_DOUBLE_EQ(p.result(), 3.0 / 4);  // tp 3, fp 1
  EXPECT_DOUBLE_EQ(r.result(), 3.0 / 5);  // tp 3, fn 2
  p.reset_state();
  r.reset_state();
  EXPECT_EQ(p.result(), 0.0);
  EXPECT_EQ(r.result(), 0.0);
  EXPECT_EQ(p.true_positives(), 0.0);
}

TEST(PrecisionRecall, NoPositivesGiveZero) {
  metrics::Precision p;
  metrics::Recall r;
  p.update_state(constant({1.0, 0.0}), constant({0.1, 0.2}));  // nothing predicted positive
  r.update_state(constant({0.0, 0.0}), constant({0.9, 0.2}));  // nothing actually positive
  EXPECT_EQ(p.result(), 0.0);
  EXPECT_EQ(r.result(), 0.0);
}

TEST(PrecisionRecall, SampleWeightsWeighTheCounts) {
  metrics::Precision p;
  // tp weight 2, fp weight 3 -> 2 / 5
  p.update_state(constant({1.0, 0.0, 1.0}), constant({0.9, 0.8, 0.1}), constant({2.0, 3.0, 7.0}));
  EXPECT_DOUBLE_EQ(p.result(), 0.4);
  metrics::Recall r;
  r.update_state(constant({1.0, 0.0, 1.0}), constant({0.9, 0.8, 0.1}), constant({2.0, 3.0, 7.0}));
  EXPECT_DOUBLE_EQ(r.result(), 2.0 / 9);
}

TEST(PrecisionRecall, ClassIdScoresOneColumn) {
  metrics::Recall r({.class_id = 1});
  // column 1: preds 1, 0 vs targets 1, 1 -> recall 0.5 (column 0 is ignored)
  r.update_state(constant({{1.0, 1.0}, {1.0, 1.0}}), constant({{0.1, 0.9}, {0.1, 0.2}}));
  EXPECT_DOUBLE_EQ(r.result(), 0.5);
  metrics::Recall bad({.class_id = 2});
  std::string msg = error_of([&] { bad.update_state(zeros({1, 2}), zeros({1, 2})); });
  EXPECT_NE(msg.find("recall"), std::string::npos) << msg;
  EXPECT_NE(msg.find("class_id 2"), std::string::npos) << msg;
}

// ---- regression and means
// ------------------------------------------------------------------------

TEST(MeanSquaredErrorMetric, WeightedMeanOfPerSampleErrors) {
  metrics::MeanSquaredError m;
  EXPECT_EQ(m.name(), "mean_squared_error");
  // per-sample: (1 + 0) / 2 = 0.5 and (4 + 4) / 2 = 4
  m.update_state(constant({{1.0, 1.0}, {0.0, 0.0}}), constant({{2.0, 1.0}, {2.0, -2.0}}));
  EXPECT_DOUBLE_EQ(m.result(), 4.5 / 2);
  // batch 2: per-sample 9 with weight 2
  m.update_state(constant({{0.0, 0.0}}), constant({{3.0, 3.0}}), constant({2.0}));
  EXPECT_DOUBLE_EQ(m.result(), (4.5 + 18) / 4);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(Mean, RunningWeightedMeanOfValues) {
  metrics::Mean m;
  EXPECT_EQ(m.name(), "mean");
  m.update_state(constant({1.0, 3.0}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0);
  m.update_state(constant({10.0}), constant({2.0}));
  EXPECT_DOUBLE_EQ(m.result(), (4.0 + 20.0) / 4);
  m.update_state(0.0, 4.0);
  EXPECT_DOUBLE_EQ(m.result(), 24.0 / 8);
  m.update_state(constant(6.0));  // a scalar counts as one value
  EXPECT_DOUBLE_EQ(m.result(), 30.0 / 9);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(Mean, ThirdTensorIsAnError) {
  metrics::Mean m({.name = "loss"});
  EXPECT_EQ(m.name(), "loss");
  std::string msg = error_of([&] { m.update_state(ones({2}), ones({2}), ones({2})); });
  EXPECT_NE(msg.find("loss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(values, sample_weight)"), std::string::npos) << msg;
}

TEST(LossMean, AveragesTheLossPerSampleAndIsNamedAfterIt) {
  metrics::LossMean m(nn::MeanAbsoluteError({.reduction = nn::Reduction::Sum}));
  EXPECT_EQ(m.name(), "mean_absolute_error");
  // per-sample mae: 1, 3 ; the loss's own Sum reduction is ignored
  m.update_state(constant({{0.0, 0.0}, {0.0, 0.0}}), constant({{1.0, -1.0}, {3.0, 3.0}}));
  EXPECT_DOUBLE_EQ(m.result(), 2.0);
  m.update_state(constant({{0.0, 0.0}}), constant({{5.0, 5.0}}), constant({2.0}));
  EXPECT_DOUBLE_EQ(m.result(), (4.0 + 10.0) / 4);
  EXPECT_EQ(metrics::LossMean(nn::MeanSquaredError(), "mse").name(), "mse");
}

TEST(Metrics, UpdatesRecordNothingOnATape) {
  Tensor x = constant({{0.3, 0.7}, {0.9, 0.1}});
  GradientTape tape;
  tape.watch(x);
  metrics::LossMean loss_mean{nn::CategoricalCrossentropy()};
  metrics::Accuracy acc;
  loss_mean.update_state(constant({{0.0, 1.0}, {1.0, 0.0}}), x);
  acc.update_state(labels({1, 0}), x);
  EXPECT_EQ(tape.num_recorded(), 0u);
  EXPECT_DOUBLE_EQ(acc.result(), 1.0);
}

TEST(Metrics, MisalignedSampleWeightsAreAnError) {
  metrics::BinaryAccuracy m;
  std::string msg = error_of([&] { m.update_state(zeros({4, 1}), zeros({4, 1}), ones({3})); });
  EXPECT_NE(msg.find("binary_accuracy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sample_weight shape [3]"), std::string::npos) << msg;
}

TEST(Metrics, StringIdentifiersBuildDefaultMetrics) {
  EXPECT_EQ(metrics::get("accuracy")->name(), "accuracy");
  EXPECT_EQ(metrics::get("acc")->name(), "accuracy");
  EXPECT_EQ(metrics::get("precision")->name(), "precision");
  EXPECT_EQ(metrics::get("mse")->name(), "mean_squared_error");
  std::string msg = error_of([] { metrics::get("f7_score"); });
  EXPECT_NE(msg.find("unknown metric 'f7_score'"), std::string::npos) << msg;
}

TEST(Metrics, RefsBuildFromValues) {
  std::vector<metrics::MetricRef> list = {metrics::Accuracy(),
                                          metrics::Precision({.threshold = 0.3})};
  list[1]->update_state(constant({1.0}), constant({0.4}));
  EXPECT_DOUBLE_EQ(list[1]->result(), 1.0);
  EXPECT_EQ(list[0]->name(), "accuracy");
}
