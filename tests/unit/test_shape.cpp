// Shape ops: concat, stack, unstack, split, tile, pad, gather (+ its scatter-add gradient) and
// one_hot, each against a naive reference written with loops over std::vector.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::noncontiguous;
using testing::rand_tensor;

// ---- naive helpers ----------------------------------------------------------------------------
using testing::ravel;
using testing::unravel;

using soma::testing::error_of;

#define EXPECT_ERROR_CONTAINS(stmt, ...)                                              \
  do {                                                                                \
    EXPECT_THROW(stmt, ::soma::Error);                                                \
    std::string msg_ = error_of([&] { (void)(stmt); });                             \
    for (const char* part_ : {__VA_ARGS__})                                           \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "message: " << msg_ << "\n"   \
                                                     << "missing: " << part_;        \
  } while (0)

// Naive concat: walk the output, find the input that owns each position along the axis.
std::vector<double> naive_concat(const std::vector<Tensor>& ts, int axis, Shape& out_shape) {
  out_shape = ts[0].shape();
  out_shape[std::size_t(axis)] = 0;
  for (const auto& t : ts) out_shape[std::size_t(axis)] += t.shape()[std::size_t(axis)];
  std::vector<std::vector<double>> vals;
  for (const auto& t : ts) vals.push_back(t.to_vector<double>());
  std::vector<double> out;
  for (std::int64_t i = 0; i < numel(out_shape); ++i) {
    auto idx = unravel(i, out_shape);
    std::size_t k = 0;
    while (idx[std::size_t(axis)] >= ts[k].shape()[std::size_t(axis)]) {
      idx[std::size_t(axis)] -= ts[k].shape()[std::size_t(axis)];
      ++k;
    }
    out.push_back(vals[k][std::size_t(ravel(idx, ts[k].shape()))]);
  }
  return out;
}

// ---- concat -----------------------------------------------------------------------------------
struct ConcatCase {
  std::vector<Shape> shapes;
  std::int64_t axis;
};

TEST(Concat, MatchesNaiveOverShapesAndAxes) {
  std::vector<ConcatCase> cases{
      {{{2, 3}, {2, 5}}, 1},
      {{{2, 3}, {4, 3}, {1, 3}}, 0},
      {{{2, 1, 4}, {2, 3, 4}}, -2},
      {{{2, 3, 1}, {2, 3, 2}, {2, 3, 3}}, -1},
      {{{2, 0}, {2, 3}, {2, 0}}, 1},
      {{{5}, {3}}, 0},
      {{{3, 2, 2}}, 1},
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    std::vector<Tensor> ts;
    for (const auto& s : c.shapes) ts.push_back(rand_tensor(s, seed++));
    int ax = int(c.axis < 0 ? c.axis + std::int64_t(c.shapes[0].size()) : c.axis);
    Shape want_shape;
    std::vector<double> want = naive_concat(ts, ax, want_shape);
    Tensor r = concat(ts, c.axis);
    ASSERT_EQ(r.shape(), want_shape) << "axis " << c.axis;
    EXPECT_TRUE(all_close(r, want, 0, 0)) << "axis " << c.axis;
  }
}

TEST(Concat, OfNonContiguousInputs) {
  Tensor a = rand_tensor({3, 2}, 110), b = rand_tensor({3, 4}, 111), c = rand_tensor({2, 3}, 112);
  std::vector<Tensor> ts{noncontiguous(a), b, transpose(c)};
  for (int axis : {1, -1}) {
    Shape s;
    std::vector<double> want = naive_concat({a, b, transpose(c)}, 1, s);
    Tensor r = concat(ts, axis);
    ASSERT_EQ(r.shape(), s);
    EXPECT_TRUE(all_close(r, want, 0, 0));
  }
  std::vector<Tensor> rows{noncontiguous(rand_tensor({2, 3}, 113)), rand_tensor({1, 3}, 114)};
  Shape s;
  std::vector<double> want = naive_concat(rows, 0, s);
  EXPECT_TRUE(all_close(concat(rows, 0), want, 0, 0));
}

TEST(Concat, LargeInputsAlongInnerAxis) {
  // Large enough to be split across threads.
  std::vector<Tensor> ts{rand_tensor({300, 200}, 115, -1, 1, DType::f32),
                         rand_tensor({300, 100}, 116, -1, 1, DType::f32)};
  Shape s;
  std::vector<double> want = naive_concat(ts, 1, s);
  EXPECT_TRUE(all_close(concat(ts, 1), want, 0, 0));
}

TEST(Concat, KeepsIntegerAndBoolDTypes) {
  Tensor a = constant<std::int32_t>({{1, 2}, {3, 4}});
  Tensor b = constant<std::int32_t>({{5}, {6}});
  Tensor r = concat({a, b}, 1);
  EXPECT_EQ(r.dtype(), DType::i32);
  EXPECT_TRUE(all_close(r, {1, 2, 5, 3, 4, 6}, 0, 0));
  Tensor p = constant<bool>({true, false}), q = constant<bool>({false});
  Tensor rb = concat({p, q});
  EXPECT_EQ(rb.dtype(), DType::boolean);
  EXPECT_TRUE(all_close(rb, {1, 0, 0}, 0, 0));
}

TEST(Concat, OfEmptyInputsIsEmpty) {
  Tensor r = concat({zeros({0, 3}), zeros({0, 3})}, 0);
  EXPECT_EQ(r.shape(), (Shape{0, 3}));
  EXPECT_EQ(concat({zeros({2, 0}), zeros({2, 0})}, 0).shape(), (Shape{4, 0}));
}

TEST(Concat, OutputHasItsOwnStorage) {
  Tensor a = rand_tensor({2}, 117);
  Tensor r = concat({a});
  EXPECT_NE(r.storage().get(), a.storage().get());
  EXPECT_TRUE(all_close(r, a, 0, 0));
}

TEST(Concat, RejectsEmptyList) {
  EXPECT_ERROR_CONTAINS(concat({}, 0), "concat", "empty list");
}

TEST(Concat, RejectsMismatchedShapesNamingBothAndTheAxis) {
  EXPECT_ERROR_CONTAINS(concat({zeros({2, 3}), zeros({3, 4})}, 1), "concat", "[2, 3]", "[3, 4]",
                        "axis 1");
  EXPECT_ERROR_CONTAINS(concat({zeros({2, 3}), zeros({2, 3, 1})}, 0), "concat", "[2, 3]",
                        "[2, 3, 1]");
}

TEST(Concat, RejectsMismatchedDTypes) {
  EXPECT_ERROR_CONTAINS(concat({zeros({2}), zeros({2}, DType::i32)}), "concat", "f32", "i32");
}

TEST(Concat, RejectsOutOfRangeAxisAndScalars) {
  EXPECT_ERROR_CONTAINS(concat({zeros({2, 3}), zeros({2, 3})}, 2), "concat", "axis 2", "rank 2");
  EXPECT_ERROR_CONTAINS(concat({zeros({2, 3}), zeros({2, 3})}, -3), "concat", "axis -3");
  EXPECT_ERROR_CONTAINS(concat({scalar(1.0), scalar(2.0)}), "concat", "scalar", "stack");
}

TEST(Concat, GradientMatchesFiniteDifferences) {
  auto f = [](const std::vector<Tensor>& x) { return concat(x, 1) * concat(x, 1); };
  EXPECT_TRUE(check_gradients(
      f, {rand_tensor({2, 1}, 120), rand_tensor({2, 3}, 121), rand_tensor({2, 2}, 122)}));
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return concat(x, -3); },
                              {rand_tensor({1, 2, 2}, 123), rand_tensor({2, 2, 2}, 124)}));
}

// ---- stack ------------------------------------------------------------------------------------
TEST(Stack, MatchesNaiveOnEveryAxis) {
  std::vector<Tensor> ts{rand_tensor({2, 3}, 130), rand_tensor({2, 3}, 131),
                         rand_tensor({2, 3}, 132)};
  std::vector<std::vector<double>> v;
  for (const auto& t : ts) v.push_back(t.to_vector<double>());
  for (std::int64_t axis : {0, 1, 2, -1, -3}) {
    int ax = int(axis < 0 ? axis + 3 : axis);
    Shape out{2, 3};
    out.insert(out.begin() + ax, 3);
    Tensor r = stack(ts, axis);
    ASSERT_EQ(r.shape(), out) << "axis " << axis;
    std::vector<double> want;
    for (std::int64_t i = 0; i < numel(out); ++i) {
      auto idx = unravel(i, out);
      std::int64_t k = idx[std::size_t(ax)];
      idx.erase(idx.begin() + ax);
      want.push_back(v[std::size_t(k)][std::size_t(ravel(idx, {2, 3}))]);
    }
    EXPECT_TRUE(all_close(r, want, 0, 0)) << "axis " << axis;
  }
}

TEST(Stack, OfScalarsGivesVector) {
  Tensor r = stack({scalar(1.0), scalar(2.0), scalar(3.0)});
  EXPECT_EQ(r.shape(), (Shape{3}));
  EXPECT_TRUE(all_close(r, {1, 2, 3}, 0, 0));
}

TEST(Stack, OfNonContiguousAndIntegerInputs) {
  Tensor a = rand_tensor({2, 2}, 133), b = rand_tensor({2, 2}, 134);
  Tensor r = stack({noncontiguous(a), transpose(b)}, 1);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 2; ++j) {
      EXPECT_EQ(r.at<double>({i, 0, j}), a.at<double>({i, j}));
      EXPECT_EQ(r.at<double>({i, 1, j}), b.at<double>({j, i}));
    }
  Tensor ri = stack({constant<std::int64_t>({1, 2}), constant<std::int64_t>({3, 4})}, -1);
  EXPECT_EQ(ri.dtype(), DType::i64);
  EXPECT_TRUE(all_close(ri, {1, 3, 2, 4}, 0, 0));
}

TEST(Stack, OfEmptyTensors) {
  EXPECT_EQ(stack({zeros({0, 2}), zeros({0, 2})}, 1).shape(), (Shape{0, 2, 2}));
}

TEST(Stack, RejectsMismatchedShapesNamingBoth) {
  EXPECT_ERROR_CONTAINS(stack({zeros({2, 3}), zeros({3, 2})}, 0), "stack", "[2, 3]", "[3, 2]",
                        "axis 0");
}

TEST(Stack, RejectsEmptyListMismatchedDTypesAndBadAxis) {
  EXPECT_ERROR_CONTAINS(stack({}), "stack", "empty list");
  EXPECT_ERROR_CONTAINS(stack({zeros({2}), zeros({2}, DType::f64)}), "stack", "f32", "f64");
  EXPECT_ERROR_CONTAINS(stack({zeros({2}), zeros({2})}, 2), "stack", "axis 2");
}

TEST(Stack, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return stack(x, 1); },
                              {rand_tensor({2, 3}, 135), rand_tensor({2, 3}, 136)}));
}

// ---- unstack ----------------------------------------------------------------------------------
TEST(Unstack, GivesOneSliceWithTheAxisDroppedPerIndex) {
  Shape s{3, 4, 2};
  Tensor t = rand_tensor(s, 140);
  std::vector<double> v = t.to_vector<double>();
  for (std::int64_t axis : {0, 1, 2, -1}) {
    int ax = int(axis < 0 ? axis + 3 : axis);
    std::vector<Tensor> parts = unstack(t, axis);
    ASSERT_EQ(std::int64_t(parts.size()), s[std::size_t(ax)]);
    Shape ps = s;
    ps.erase(ps.begin() + ax);
    for (std::int64_t k = 0; k < std::int64_t(parts.size()); ++k) {
      ASSERT_EQ(parts[std::size_t(k)].shape(), ps);
      std::vector<double> want;
      for (std::int64_t i = 0; i < numel(ps); ++i) {
        auto idx = unravel(i, ps);
        idx.insert(idx.begin() + ax, k);
        want.push_back(v[std::size_t(ravel(idx, s))]);
      }
      EXPECT_TRUE(all_close(parts[std::size_t(k)], want, 0, 0)) << "axis " << axis << " part " << k;
    }
  }
}

TEST(Unstack, PartsAreViewsOfTheInput) {
  Tensor t = rand_tensor({2, 3}, 141);
  std::vector<Tensor> parts = unstack(t, 1);
  for (const auto& p : parts) EXPECT_EQ(p.storage().get(), t.storage().get());
  static_cast<double*>(t.storage()->data)[5] = 9.0;  // t[1, 2]
  EXPECT_EQ(parts[2].at<double>({1}), 9.0);
}

TEST(Unstack, OfNonContiguousInputAndEmptyAxis) {
  Tensor base = rand_tensor({2, 3}, 142);
  std::vector<Tensor> parts = unstack(noncontiguous(base), -1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].at<double>({1}), base.at<double>({1, 1}));
  EXPECT_TRUE(unstack(zeros({0, 3}), 0).empty());
  EXPECT_EQ(unstack(zeros({2, 0}), 0)[0].shape(), (Shape{0}));
}

TEST(Unstack, IsTheInverseOfStack) {
  Tensor t = rand_tensor({3, 2, 2}, 143);
  EXPECT_TRUE(all_close(stack(unstack(t, 2), 2), t, 0, 0));
}

TEST(Unstack, RejectsScalarAndBadAxis) {
  EXPECT_ERROR_CONTAINS(unstack(scalar(1.0)), "unstack", "rank 0");
  EXPECT_ERROR_CONTAINS(unstack(zeros({2, 3}), 2), "unstack", "axis 2");
}

TEST(Unstack, GradientMatchesFiniteDifferences) {
  // Only some parts reach the output: the others get zero gradient.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        auto p = unstack(x[0], 1);
        return p[0] * p[3] + p[2];
      },
      {rand_tensor({2, 4, 3}, 144)}));
}

// ---- split ------------------------------------------------------------------------------------
void expect_split_matches(const Tensor& t, const std::vector<Tensor>& parts, int ax,
                          const std::vector<std::int64_t>& sizes) {
  ASSERT_EQ(parts.size(), sizes.size());
  std::vector<double> v = t.to_vector<double>();
  std::int64_t off = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Shape ps = t.shape();
    ps[std::size_t(ax)] = sizes[k];
    ASSERT_EQ(parts[k].shape(), ps) << "part " << k;
    std::vector<double> want;
    for (std::int64_t i = 0; i < numel(ps); ++i) {
      auto idx = unravel(i, ps);
      idx[std::size_t(ax)] += off;
      want.push_back(v[std::size_t(ravel(idx, t.shape()))]);
    }
    EXPECT_TRUE(all_close(parts[k], want, 0, 0)) << "part " << k;
    off += sizes[k];
  }
}

TEST(Split, IntoEqualParts) {
  Tensor t = rand_tensor({6, 4}, 150);
  expect_split_matches(t, split(t, 3, 0), 0, {2, 2, 2});
  expect_split_matches(t, split(t, 2, -1), 1, {2, 2});
  expect_split_matches(t, split(t, 1, 1), 1, {4});
}

TEST(Split, BySizesWithOneInferred) {
  Tensor t = rand_tensor({2, 7}, 151);
  expect_split_matches(t, split(t, std::vector<std::int64_t>{2, -1, 1}, -1), 1, {2, 4, 1});
  expect_split_matches(t, split(t, std::vector<std::int64_t>{0, 7}, 1), 1, {0, 7});
  expect_split_matches(t, split(t, std::vector<std::int64_t>{3, 4, -1}, 1), 1, {3, 4, 0});
}

TEST(Split, OfNonContiguousAndBoolInputs) {
  Tensor base = rand_tensor({3, 4}, 152);
  expect_split_matches(base, split(noncontiguous(base), std::vector<std::int64_t>{1, 3}, 1), 1,
                       {1, 3});
  Tensor b = constant<bool>({true, false, false, true});
  auto parts = split(b, 2);
  EXPECT_EQ(parts[1].dtype(), DType::boolean);
  EXPECT_TRUE(all_close(parts[1], {0, 1}, 0, 0));
}

TEST(Split, PartsAreViewsOfTheInput) {
  Tensor t = rand_tensor({4, 2}, 153);
  auto parts = split(t, 2);
  EXPECT_EQ(parts[1].storage().get(), t.storage().get());
  static_cast<double*>(t.storage()->data)[6] = -3.0;  // t[3, 0]
  EXPECT_EQ(parts[1].at<double>({1, 0}), -3.0);
}

TEST(Split, RejectsSizesNotSummingToTheDimension) {
  EXPECT_ERROR_CONTAINS(split(zeros({2, 7}), std::vector<std::int64_t>{2, 3}, 1), "split",
                        "[2, 3]", "sum to 5", "size 7");
  EXPECT_ERROR_CONTAINS(split(zeros({2, 7}), std::vector<std::int64_t>{5, 3, -1}, 1), "split",
                        "[5, 3, -1]", "size 7");
}

TEST(Split, RejectsUnevenEqualSplitAndBadCounts) {
  EXPECT_ERROR_CONTAINS(split(zeros({2, 7}), 3, 1), "split", "size 7", "3 equal parts");
  EXPECT_ERROR_CONTAINS(split(zeros({4}), 0), "split", "positive", "0");
  EXPECT_ERROR_CONTAINS(split(zeros({4}), std::vector<std::int64_t>{-1, -1}), "split", "-1");
  EXPECT_ERROR_CONTAINS(split(zeros({4}), std::vector<std::int64_t>{-2, 6}), "split",
                        "non-negative");
  EXPECT_ERROR_CONTAINS(split(zeros({4}), 2, 1), "split", "axis 1");
}

TEST(Split, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        auto p = split(x[0], std::vector<std::int64_t>{2, -1, 2}, 1);
        return p[0] * p[2] + p[0];  // the middle part gets no gradient
      },
      {rand_tensor({3, 7}, 154)}));
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return split(x[0], 2, 0)[1]; },
                              {rand_tensor({4, 3}, 155)}));
}

// ---- tile -------------------------------------------------------------------------------------
std::vector<double> naive_tile(const Tensor& t, const std::vector<std::int64_t>& m, Shape& out) {
  out = t.shape();
  for (std::size_t d = 0; d < out.size(); ++d) out[d] *= m[d];
  std::vector<double> v = t.to_vector<double>(), r;
  for (std::int64_t i = 0; i < numel(out); ++i) {
    auto idx = unravel(i, out);
    for (std::size_t d = 0; d < idx.size(); ++d) idx[d] %= t.shape()[d];
    r.push_back(v[std::size_t(ravel(idx, t.shape()))]);
  }
  return r;
}

TEST(Tile, MatchesNaiveOverShapes) {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> multiples;
  };
  std::uint64_t seed = 160;
  for (const Case& c : {Case{{2, 3}, {2, 3}}, Case{{3}, {4}}, Case{{2, 1, 3}, {1, 2, 2}},
                        Case{{2, 3}, {1, 1}}, Case{{2, 3}, {0, 2}}, Case{{0, 2}, {3, 1}}}) {
    Tensor t = rand_tensor(c.shape, seed++);
    Shape s;
    std::vector<double> want = naive_tile(t, c.multiples, s);
    Tensor r = tile(t, c.multiples);
    ASSERT_EQ(r.shape(), s) << shape_str(c.shape) << " x " << shape_str(c.multiples);
    EXPECT_TRUE(all_close(r, want, 0, 0)) << shape_str(c.shape) << " x " << shape_str(c.multiples);
  }
}

TEST(Tile, OfScalarWithNoMultiplesIsTheValue) {
  Tensor r = tile(scalar(2.5, DType::f64), {});
  EXPECT_EQ(r.shape(), Shape{});
  EXPECT_EQ(r.item<double>(), 2.5);
}

TEST(Tile, OfNonContiguousAndIntegerInputs) {
  Tensor base = rand_tensor({2, 3}, 170);
  Shape s;
  std::vector<double> want = naive_tile(base, {3, 2}, s);
  EXPECT_TRUE(all_close(tile(noncontiguous(base), {3, 2}), want, 0, 0));
  Tensor ti = tile(constant<std::int32_t>({1, 2}), {3});
  EXPECT_EQ(ti.dtype(), DType::i32);
  EXPECT_TRUE(all_close(ti, {1, 2, 1, 2, 1, 2}, 0, 0));
}

TEST(Tile, RejectsMultiplesLengthMismatch) {
  EXPECT_ERROR_CONTAINS(tile(zeros({2, 3}), {2}), "tile", "[2]", "[2, 3]", "one per axis");
}

TEST(Tile, RejectsNegativeMultiples) {
  EXPECT_ERROR_CONTAINS(tile(zeros({2, 3}), {2, -1}), "tile", "non-negative", "[2, -1]");
}

TEST(Tile, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return tile(x[0], {2, 1, 3}); },
                              {rand_tensor({2, 3, 2}, 171)}));
}

// ---- pad --------------------------------------------------------------------------------------
std::vector<double> naive_pad(const Tensor& t,
                              const std::vector<std::pair<std::int64_t, std::int64_t>>& p,
                              double value, Shape& out) {
  out = t.shape();
  for (std::size_t d = 0; d < out.size(); ++d) out[d] += p[d].first + p[d].second;
  std::vector<double> v = t.to_vector<double>(), r;
  for (std::int64_t i = 0; i < numel(out); ++i) {
    auto idx = unravel(i, out);
    bool inside = true;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      idx[d] -= p[d].first;
      inside = inside && idx[d] >= 0 && idx[d] < t.shape()[d];
    }
    r.push_back(inside ? v[std::size_t(ravel(idx, t.shape()))] : value);
  }
  return r;
}

TEST(Pad, MatchesNaiveOverShapesAndValues) {
  using P = std::vector<std::pair<std::int64_t, std::int64_t>>;
  struct Case {
    Shape shape;
    P paddings;
    double value;
  };
  std::uint64_t seed = 180;
  for (const Case& c : {Case{{2, 3}, {{1, 2}, {0, 3}}, 0.0}, Case{{2, 3}, {{0, 0}, {2, 1}}, -1.5},
                        Case{{4}, {{3, 0}}, 7.0}, Case{{2, 1, 3}, {{1, 1}, {2, 0}, {0, 1}}, 0.25},
                        Case{{0, 2}, {{1, 1}, {0, 0}}, 3.0}, Case{{2, 2}, {{0, 0}, {0, 0}}, 1.0}}) {
    Tensor t = rand_tensor(c.shape, seed++);
    Shape s;
    std::vector<double> want = naive_pad(t, c.paddings, c.value, s);
    Tensor r = pad(t, c.paddings, c.value);
    ASSERT_EQ(r.shape(), s) << shape_str(c.shape);
    EXPECT_TRUE(all_close(r, want, 0, 0)) << shape_str(c.shape);
    EXPECT_TRUE(all_close(pad(noncontiguous(t), c.paddings, c.value), want, 0, 0))
        << "non-contiguous " << shape_str(c.shape);
  }
}

TEST(Pad, OfScalarWithNoPaddingsIsACopy) {
  Tensor s = scalar(4.0, DType::f64);
  Tensor r = pad(s, {});
  EXPECT_EQ(r.shape(), Shape{});
  EXPECT_EQ(r.item<double>(), 4.0);
  EXPECT_NE(r.storage().get(), s.storage().get());
}

TEST(Pad, KeepsIntegerAndBoolDTypes) {
  Tensor r = pad(constant<std::int32_t>({1, 2}), {{1, 2}}, 7.0);
  EXPECT_EQ(r.dtype(), DType::i32);
  EXPECT_TRUE(all_close(r, {7, 1, 2, 7, 7}, 0, 0));
  Tensor rb = pad(constant<bool>({true}), {{1, 1}});
  EXPECT_EQ(rb.dtype(), DType::boolean);
  EXPECT_TRUE(all_close(rb, {0, 1, 0}, 0, 0));
}

TEST(Pad, RejectsNegativePadding) {
  EXPECT_ERROR_CONTAINS(pad(zeros({2, 3}), {{0, 0}, {1, -1}}), "pad", "non-negative", "{1, -1}",
                        "axis 1", "[2, 3]");
}

TEST(Pad, RejectsWrongNumberOfPairs) {
  EXPECT_ERROR_CONTAINS(pad(zeros({2, 3}), {{1, 1}}), "pad", "1 {before, after} pairs", "[2, 3]");
}

TEST(Pad, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return pad(x[0], {{1, 2}, {0, 1}, {2, 0}}, 0.5); },
      {rand_tensor({2, 3, 2}, 190)}));
}

TEST(Pad, SecondDerivativeMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        Tensor xx = x[0];
        GradientTape inner;
        inner.watch(xx);
        Tensor y = pad(xx * xx * xx, {{2, 1}});
        return inner.gradient(y, xx);
      },
      {rand_tensor({3}, 191)}));
}

// ---- gather -----------------------------------------------------------------------------------
std::vector<double> naive_gather(const Tensor& t, const std::vector<std::int64_t>& ids,
                                 const Shape& idx_shape, int ax, Shape& out) {
  const Shape& s = t.shape();
  out = Shape(s.begin(), s.begin() + ax);
  out.insert(out.end(), idx_shape.begin(), idx_shape.end());
  out.insert(out.end(), s.begin() + ax + 1, s.end());
  std::vector<double> v = t.to_vector<double>(), r;
  const std::size_t ir = idx_shape.size();
  for (std::int64_t i = 0; i < numel(out); ++i) {
    auto o = unravel(i, out);
    std::vector<std::int64_t> src(o.begin(), o.begin() + ax);
    std::vector<std::int64_t> k(o.begin() + ax, o.begin() + ax + std::int64_t(ir));
    std::int64_t j = ids[std::size_t(ravel(k, idx_shape))];
    src.push_back(j < 0 ? j + s[std::size_t(ax)] : j);
    src.insert(src.end(), o.begin() + ax + std::int64_t(ir), o.end());
    r.push_back(v[std::size_t(ravel(src, s))]);
  }
  return r;
}

TEST(Gather, MatchesNaiveOnEveryAxisWithMultiDimIndices) {
  Shape s{5, 3, 4};
  Tensor t = rand_tensor(s, 200);
  for (std::int64_t axis : {0, 1, 2, -1, -3}) {
    int ax = int(axis < 0 ? axis + 3 : axis);
    std::int64_t n = s[std::size_t(ax)];
    std::vector<std::int64_t> ids{0, n - 1, 1, 1, n - 2, 0};  // duplicates included
    for (DType idt : {DType::i64, DType::i32}) {
      Tensor idx = cast(constant(ids, {2, 3}), idt);
      Shape os;
      std::vector<double> want = naive_gather(t, ids, {2, 3}, ax, os);
      Tensor r = gather(t, idx, axis);
      ASSERT_EQ(r.shape(), os) << "axis " << axis;
      EXPECT_TRUE(all_close(r, want, 0, 0)) << "axis " << axis << " " << dtype_name(idt);
    }
  }
}

TEST(Gather, AcceptsNegativeIndicesCountedFromTheEnd) {
  Tensor t = constant<double>({10, 11, 12, 13});
  EXPECT_TRUE(all_close(gather(t, constant<std::int64_t>({-1, -4, 2})), {13, 10, 12}, 0, 0));
}

TEST(Gather, ScalarIndexDropsTheAxisAndEmptyIndicesGiveEmpty) {
  Tensor t = rand_tensor({3, 4}, 201);
  Tensor r = gather(t, constant<std::int64_t>(2), 1);
  ASSERT_EQ(r.shape(), (Shape{3}));
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(r.at<double>({i}), t.at<double>({i, 2}));
  EXPECT_EQ(gather(t, zeros({0}, DType::i64), 0).shape(), (Shape{0, 4}));
  EXPECT_EQ(gather(zeros({0, 2}), zeros({3}, DType::i32), 1).shape(), (Shape{0, 3}));
}

TEST(Gather, OfNonContiguousInputsAndIndices) {
  Tensor base = rand_tensor({4, 3}, 202);
  std::vector<std::int64_t> ids{3, 0, 2};
  for (int ax : {0, 1}) {
    std::vector<std::int64_t> ia = ax == 0 ? ids : std::vector<std::int64_t>{2, 0, 1};
    Tensor ix = noncontiguous(constant(ia, {3}));
    Shape s;
    std::vector<double> want = naive_gather(base, ia, {3}, ax, s);
    EXPECT_TRUE(all_close(gather(noncontiguous(base), ix, ax), want, 0, 0)) << "axis " << ax;
    Shape st;
    std::vector<double> want_t = naive_gather(transpose(base), ia, {3}, 1 - ax, st);
    EXPECT_TRUE(all_close(gather(transpose(base), ix, 1 - ax), want_t, 0, 0));
  }
}

TEST(Gather, KeepsIntegerBoolAndHalfDTypes) {
  Tensor idx = constant<std::int32_t>({2, 0});
  for (DType dt : {DType::i32, DType::i64, DType::u8, DType::boolean, DType::f16, DType::bf16}) {
    Tensor t = cast(constant<double>({0, 1, 2}), dt);
    Tensor r = gather(t, idx);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_TRUE(all_close(r, {dt == DType::boolean ? 1.0 : 2.0, 0.0}, 0, 0)) << dtype_name(dt);
  }
}

TEST(Gather, LargeTableRowsLikeAnEmbedding) {
  Tensor t = rand_tensor({1000, 64}, 203, -1, 1, DType::f32);
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 2000; ++i) ids.push_back((i * 7919) % 1000);
  Shape s;
  std::vector<double> want = naive_gather(t, ids, {2000}, 0, s);
  EXPECT_TRUE(all_close(gather(t, constant(ids, {2000}), 0), want, 0, 0));
}

TEST(Gather, RejectsOutOfRangeIndexNamingIndexAndAxisSize) {
  Tensor t = zeros({3, 5});
  EXPECT_ERROR_CONTAINS(gather(t, constant<std::int64_t>({0, 5}), 1), "gather", "index 5",
                        "axis 1", "size 5");
  EXPECT_ERROR_CONTAINS(gather(t, constant<std::int32_t>({-4}), 0), "gather", "index -4",
                        "axis 0", "size 3");
  EXPECT_ERROR_CONTAINS(gather(zeros({0, 2}), constant<std::int32_t>({0}), 0), "gather",
                        "index 0", "size 0");
}

TEST(Gather, RejectsNonIntegerIndicesAndBadAxis) {
  EXPECT_ERROR_CONTAINS(gather(zeros({3}), zeros({2})), "gather", "i32 or i64", "f32");
  EXPECT_ERROR_CONTAINS(gather(zeros({3}), constant<std::int64_t>({0}), 1), "gather", "axis 1");
  EXPECT_ERROR_CONTAINS(gather(scalar(1.0), constant<std::int64_t>({0})), "gather", "rank 0");
}

TEST(Gather, GradientAddsRepeatedIndices) {
  Tensor x = rand_tensor({4}, 204);
  GradientTape tape;
  tape.watch(x);
  Tensor y = gather(x, constant<std::int64_t>({0, 0, 2, -4}));
  EXPECT_TRUE(all_close(tape.gradient(y, x), {3, 0, 1, 0}, 0, 0));
}

TEST(Gather, GradientMatchesFiniteDifferences) {
  std::vector<std::int64_t> ids{2, 0, 2, -1, 1, 1};
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& x) { return gather(x[0], constant(ids, {3, 2}), 0); },
      {rand_tensor({3, 2}, 205)}));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& x) { return gather(x[0], constant(ids, {2, 3}), -2); },
      {rand_tensor({2, 3, 2}, 206)}));
}

TEST(Gather, GradientOnManyThreadsMatchesNaiveScatterAdd) {
  // Few leading rows and many indices: the scatter-add splits the destination rows.
  const std::int64_t n = 50, k = 4000, inner = 16;
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < k; ++i) ids.push_back((i * 37) % n);
  Tensor g = rand_tensor({k, inner}, 207);
  static const OpDef& d = get_op("gather_grad");
  Tensor r = call_op1(d, {g, constant(ids, {k})},
                      {{"axis", std::int64_t(0)}, {"input_shape", Shape{n, inner}}});
  std::vector<double> gv = g.to_vector<double>(), want(std::size_t(n * inner), 0.0);
  for (std::int64_t j = 0; j < k; ++j)
    for (std::int64_t i = 0; i < inner; ++i)
      want[std::size_t(ids[std::size_t(j)] * inner + i)] += gv[std::size_t(j * inner + i)];
  EXPECT_TRUE(all_close(r, want, 1e-12, 1e-12));
}

TEST(Gather, ScatterAddGradientIsGather) {
  // gather_grad is linear in g; its own gradient is gather again.
  std::vector<std::int64_t> ids{1, 1, 0};
  static const OpDef& d = get_op("gather_grad");
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& x) {
        return call_op1(d, {x[0], constant(ids, {3})},
                        {{"axis", std::int64_t(1)}, {"input_shape", Shape{2, 2}}});
      },
      {rand_tensor({2, 3}, 208)}));
}

TEST(Gather, SecondDerivativeMatchesFiniteDifferences) {
  std::vector<std::int64_t> ids{1, 1, 0};
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& x) {
        Tensor xx = x[0];
        GradientTape inner;
        inner.watch(xx);
        Tensor y = gather(xx, constant(ids, {3}));
        return inner.gradient(y * y * y, xx);
      },
      {rand_tensor({2}, 209)}));
}

// ---- one_hot ----------------------------------------------------------------------------------
std::vector<double> naive_one_hot(const std::vector<std::int64_t>& ids, std::int64_t depth,
                                  double on, double off) {
  std::vector<double> r;
  for (auto i : ids)
    for (std::int64_t j = 0; j < depth; ++j) r.push_back(i == j ? on : off);
  return r;
}

TEST(OneHot, MatchesNaiveIncludingOutOfRangeRows) {
  std::vector<std::int64_t> ids{0, 3, -1, 2, 4, 1};
  for (DType idt : {DType::i64, DType::i32}) {
    Tensor idx = cast(constant(ids, {2, 3}), idt);
    Tensor r = one_hot(idx, 4);
    EXPECT_EQ(r.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(r.dtype(), DType::f32);
    EXPECT_TRUE(all_close(r, naive_one_hot(ids, 4, 1, 0), 0, 0)) << dtype_name(idt);
  }
}

TEST(OneHot, UsesGivenDTypeAndValues) {
  std::vector<std::int64_t> ids{2, 0, 5};
  Tensor r = one_hot(constant(ids, {3}), 3, DType::f64, 0.9, -0.1);
  EXPECT_EQ(r.dtype(), DType::f64);
  EXPECT_TRUE(all_close(r, naive_one_hot(ids, 3, 0.9, -0.1), 0, 0));
  Tensor ri = one_hot(constant(ids, {3}), 3, DType::i32, 5, 1);
  EXPECT_EQ(ri.dtype(), DType::i32);
  EXPECT_TRUE(all_close(ri, naive_one_hot(ids, 3, 5, 1), 0, 0));
}

TEST(OneHot, OfScalarNonContiguousAndEmptyIndices) {
  EXPECT_TRUE(all_close(one_hot(constant<std::int64_t>(1), 3), {0, 1, 0}, 0, 0));
  std::vector<std::int64_t> ids{1, 0};
  EXPECT_TRUE(all_close(one_hot(noncontiguous(constant(ids, {2})), 2), {0, 1, 1, 0}, 0, 0));
  EXPECT_EQ(one_hot(zeros({0}, DType::i64), 3).shape(), (Shape{0, 3}));
  EXPECT_EQ(one_hot(constant<std::int64_t>({1, 2}), 0).shape(), (Shape{2, 0}));
}

TEST(OneHot, LargeInputSplitAcrossThreads) {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 50000; ++i) ids.push_back(i % 11 - 1);
  Tensor r = one_hot(constant(ids, {50000}), 10);
  EXPECT_TRUE(all_close(r, naive_one_hot(ids, 10, 1, 0), 0, 0));
}

TEST(OneHot, RejectsNonIntegerIndicesAndNegativeDepth) {
  EXPECT_ERROR_CONTAINS(one_hot(zeros({2}), 3), "one_hot", "i32 or i64", "f32");
  EXPECT_ERROR_CONTAINS(one_hot(constant<std::int64_t>({1}), -1), "one_hot", "depth", "-1");
}

TEST(OneHot, IsNotDifferentiable) {
  // No gradient definition: the tape never records it, whatever feeds the indices.
  EXPECT_EQ(get_op("one_hot").grad, nullptr);
  Tensor x = rand_tensor({2}, 210, 0.0, 2.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = one_hot(cast(x, DType::i64), 3, DType::f64);
  EXPECT_FALSE(tape.gradient(y, x).defined());
}

}  // namespace
}  // namespace soma
