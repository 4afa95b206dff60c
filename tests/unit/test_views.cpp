// View ops: reshape, transpose/permute, slice, operator[], squeeze, expand_dims, broadcast_to,
// and the copying ops that go with them (contiguous, copy/clone, cast, stop_gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
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

// Writes `value` straight into the storage element that `view[idx]` refers to (f64 only).
void poke(const Tensor& view, const std::vector<std::int64_t>& idx, double value) {
  std::int64_t off = view.offset();
  for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * view.strides()[d];
  static_cast<double*>(view.storage()->data)[off] = value;
}

using soma::testing::error_of;

#define EXPECT_ERROR_CONTAINS(stmt, ...)                                              \
  do {                                                                                \
    EXPECT_THROW(stmt, ::soma::Error);                                                \
    std::string msg_ = error_of([&] { (void)(stmt); });                             \
    for (const char* part_ : {__VA_ARGS__})                                           \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "message: " << msg_ << "\n"   \
                                                     << "missing: " << part_;        \
  } while (0)

// ---- reshape ----------------------------------------------------------------------------------
TEST(Reshape, KeepsRowMajorOrder) {
  Tensor t = rand_tensor({2, 3, 4}, 1);
  Tensor r = reshape(t, {4, 6});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_TRUE(all_close(r, t.to_vector<double>(), 0, 0));
}

TEST(Reshape, InfersOneMinusOneDimension) {
  Tensor t = rand_tensor({2, 3, 4}, 2);
  EXPECT_EQ(reshape(t, {-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(reshape(t, {2, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(reshape(t, {-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.reshape({3, -1, 2}).shape(), (Shape{3, 4, 2}));
}

TEST(Reshape, HandlesScalarsAndEmptyTensors) {
  Tensor s = scalar(4.5, DType::f64);
  Tensor r = reshape(s, {1, 1});
  EXPECT_EQ(r.shape(), (Shape{1, 1}));
  EXPECT_EQ(r.at<double>({0, 0}), 4.5);
  EXPECT_EQ(reshape(r, {}).shape(), Shape{});
  EXPECT_EQ(reshape(zeros({0, 3}), {3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(reshape(zeros({0, 3}), {-1, 3}).shape(), (Shape{0, 3}));
}

TEST(Reshape, OfContiguousTensorSharesStorage) {
  Tensor t = rand_tensor({2, 6}, 3);
  Tensor r = reshape(t, {3, 4});
  EXPECT_EQ(r.storage().get(), t.storage().get());
  poke(t, {1, 2}, 42.0);  // row-major element 8
  EXPECT_EQ(r.at<double>({2, 0}), 42.0);
}

TEST(Reshape, OfNonContiguousTensorCopiesInRowMajorOrder) {
  Tensor t = rand_tensor({3, 4}, 4);
  Tensor tt = transpose(t);  // [4, 3], not contiguous
  ASSERT_FALSE(tt.is_contiguous());
  Tensor r = reshape(tt, {12});
  EXPECT_NE(r.storage().get(), t.storage().get());
  std::vector<double> v = t.to_vector<double>(), want;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) want.push_back(v[std::size_t(i * 4 + j)]);
  EXPECT_TRUE(all_close(r, want, 0, 0));
  poke(t, {0, 0}, 99.0);  // the copy does not see later writes
  EXPECT_NE(r.at<double>({0}), 99.0);
}

TEST(Reshape, RejectsWrongElementCountNamingBothShapes) {
  Tensor t = zeros({2, 3});
  EXPECT_ERROR_CONTAINS(reshape(t, {4, 2}), "reshape", "[2, 3]", "[4, 2]");
  EXPECT_ERROR_CONTAINS(reshape(t, {-1, 4}), "reshape", "[2, 3]", "[-1, 4]");
}

TEST(Reshape, RejectsTwoUnknownDimensions) {
  EXPECT_ERROR_CONTAINS(reshape(zeros({2, 3}), {-1, -1}), "reshape", "-1");
}

TEST(Reshape, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return reshape(x[0], {3, -1}); },
                              {rand_tensor({2, 3, 2}, 5)}));
}

TEST(Reshape, GradientOfNonContiguousInputMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return reshape(transpose(x[0]), {-1}) * 3.0; },
      {rand_tensor({2, 3}, 6)}));
}

// ---- transpose / permute ----------------------------------------------------------------------
TEST(Transpose, MatchesNaivePermutation) {
  Shape s{2, 3, 4};
  Tensor t = rand_tensor(s, 7);
  std::vector<double> v = t.to_vector<double>();
  for (std::vector<std::int64_t> perm :
       {std::vector<std::int64_t>{2, 0, 1}, {1, 0, 2}, {0, 1, 2}, {2, 1, 0}, {-1, 0, -2}}) {
    Tensor r = transpose(t, perm);
    std::vector<std::int64_t> p = perm;
    for (auto& a : p) a = a < 0 ? a + 3 : a;
    Shape out{s[std::size_t(p[0])], s[std::size_t(p[1])], s[std::size_t(p[2])]};
    ASSERT_EQ(r.shape(), out);
    std::vector<double> want(v.size());
    for (std::int64_t i = 0; i < numel(out); ++i) {
      auto oi = unravel(i, out);
      std::vector<std::int64_t> ii(3);
      for (std::size_t d = 0; d < 3; ++d) ii[std::size_t(p[d])] = oi[d];
      want[std::size_t(i)] = v[std::size_t(ravel(ii, s))];
    }
    EXPECT_TRUE(all_close(r, want, 0, 0)) << "perm " << shape_str(perm);
  }
}

TEST(Transpose, DefaultReversesAxes) {
  Tensor t = rand_tensor({2, 3, 4}, 8);
  EXPECT_TRUE(all_close(transpose(t), transpose(t, {2, 1, 0}), 0, 0));
  EXPECT_TRUE(all_close(t.transpose(), transpose(t, {2, 1, 0}), 0, 0));
}

TEST(Transpose, TensorMethodsSwapAndPermute) {
  Tensor t = rand_tensor({2, 3, 4}, 9);
  EXPECT_TRUE(all_close(t.transpose(0, -1), transpose(t, {2, 1, 0}), 0, 0));
  EXPECT_TRUE(all_close(t.permute({1, 2, 0}), transpose(t, {1, 2, 0}), 0, 0));
}

TEST(Transpose, IsAViewSharingStorage) {
  Tensor t = rand_tensor({2, 3}, 10);
  Tensor r = transpose(t);
  EXPECT_EQ(r.storage().get(), t.storage().get());
  EXPECT_FALSE(r.is_contiguous());
  poke(r, {2, 1}, -7.0);
  EXPECT_EQ(t.at<double>({1, 2}), -7.0);
}

TEST(Transpose, RejectsBadPermutation) {
  Tensor t = zeros({2, 3});
  EXPECT_ERROR_CONTAINS(transpose(t, {0}), "transpose", "1 entries", "rank 2");
  EXPECT_ERROR_CONTAINS(transpose(t, {1, 1}), "transpose", "twice");
  EXPECT_ERROR_CONTAINS(transpose(t, {0, 2}), "transpose", "axis 2", "rank 2");
  EXPECT_ERROR_CONTAINS(t.transpose(0, 5), "transpose", "axis 5");
}

TEST(Transpose, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return transpose(x[0], {1, 2, 0}); },
      {rand_tensor({2, 3, 2}, 11)}));
}

// ---- slice ------------------------------------------------------------------------------------
// Python's slice.indices(n), written out: the elements a[start:stop:step] picks.
std::vector<std::int64_t> python_slice(std::int64_t n, std::optional<std::int64_t> start,
                                       std::optional<std::int64_t> stop, std::int64_t step) {
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  std::int64_t b = adjust(start, step < 0 ? n - 1 : 0);
  std::int64_t e = adjust(stop, step < 0 ? -1 : n);
  std::vector<std::int64_t> out;
  if (step > 0)
    for (std::int64_t i = b; i < e; i += step) out.push_back(i);
  else
    for (std::int64_t i = b; i > e; i += step) out.push_back(i);
  return out;
}

TEST(Slice, MatchesPythonSemanticsIncludingClampingAndNegativeSteps) {
  const std::int64_t n = 7;
  Tensor t = rand_tensor({n}, 12);
  std::vector<double> v = t.to_vector<double>();
  std::vector<std::optional<std::int64_t>> bounds{std::nullopt};
  for (std::int64_t b = -10; b <= 10; ++b) bounds.push_back(b);
  int checked = 0;
  for (auto start : bounds)
    for (auto stop : bounds)
      for (std::int64_t step : {-3, -2, -1, 1, 2, 3}) {
        Tensor r = slice(t, {Slice{start, stop, step}});
        std::vector<double> want;
        for (auto i : python_slice(n, start, stop, step)) want.push_back(v[std::size_t(i)]);
        ASSERT_EQ(r.shape(), (Shape{std::int64_t(want.size())}))
            << "start " << (start ? std::to_string(*start) : "None") << " stop "
            << (stop ? std::to_string(*stop) : "None") << " step " << step;
        ASSERT_TRUE(all_close(r, want, 0, 0));
        ++checked;
      }
  EXPECT_EQ(checked, 22 * 22 * 6);
}

TEST(Slice, SlicesSeveralAxesOfNonContiguousInput) {
  Shape s{4, 5, 6};
  Tensor base = rand_tensor(s, 13);
  Tensor t = noncontiguous(base);
  std::vector<double> v = base.to_vector<double>();
  Tensor r = slice(t, {Slice{3, std::nullopt, -2}, Slice{1, -1, 2}, Slice{std::nullopt, 0, -1}});
  auto i0 = python_slice(4, 3, std::nullopt, -2);
  auto i1 = python_slice(5, 1, -1, 2);
  auto i2 = python_slice(6, std::nullopt, 0, -1);
  ASSERT_EQ(r.shape(), (Shape{std::int64_t(i0.size()), std::int64_t(i1.size()),
                              std::int64_t(i2.size())}));
  std::vector<double> want;
  for (auto a : i0)
    for (auto b : i1)
      for (auto c : i2) want.push_back(v[std::size_t(ravel({a, b, c}, s))]);
  EXPECT_TRUE(all_close(r, want, 0, 0));
}

TEST(Slice, FewerSlicesThanAxesKeepTheRest) {
  Tensor t = rand_tensor({3, 4}, 14);
  Tensor r = slice(t, {Slice{1, 3}});
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(r.at<double>({1, 3}), t.at<double>({2, 3}));
}

TEST(Slice, AlongOneAxisWithTensorMethod) {
  Tensor t = rand_tensor({3, 4}, 15);
  Tensor r = t.slice(-1, std::nullopt, std::nullopt, -1);  // reverse the columns
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(r.at<double>({i, j}), t.at<double>({i, 3 - j}));
}

TEST(Slice, IsAViewSharingStorage) {
  Tensor t = rand_tensor({4, 5}, 16);
  Tensor r = slice(t, {Slice{1, 4, 2}, Slice{std::nullopt, std::nullopt, -1}});
  EXPECT_EQ(r.storage().get(), t.storage().get());
  poke(t, {3, 0}, 5.5);  // r[1, 4]
  EXPECT_EQ(r.at<double>({1, 4}), 5.5);
  poke(r, {0, 0}, -5.5);  // t[1, 4]
  EXPECT_EQ(t.at<double>({1, 4}), -5.5);
}

TEST(Slice, EmptyResultHasZeroLength) {
  Tensor t = rand_tensor({5}, 17);
  EXPECT_EQ(slice(t, {Slice{3, 1}}).shape(), (Shape{0}));
  EXPECT_EQ(slice(t, {Slice{1, 3, -1}}).shape(), (Shape{0}));
  EXPECT_EQ(slice(zeros({0, 2}), {Slice{0, 5}}).shape(), (Shape{0, 2}));
}

TEST(Slice, RejectsZeroStep) {
  EXPECT_ERROR_CONTAINS(slice(zeros({3}), {Slice{0, 2, 0}}), "slice", "step", "zero");
}

TEST(Slice, RejectsMoreSlicesThanAxes) {
  EXPECT_ERROR_CONTAINS(slice(zeros({3}), {Slice{}, Slice{}}), "slice", "2 slices", "[3]");
}

TEST(Slice, RejectsOutOfRangeAxis) {
  EXPECT_ERROR_CONTAINS(zeros({3, 2}).slice(2, 0, 1), "slice", "axis 2", "rank 2");
}

TEST(Slice, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return slice(x[0], {Slice{1, 4, 2}, Slice{0, -1}}); },
      {rand_tensor({5, 3}, 18)}));
}

TEST(Slice, GradientWithNegativeStepMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        return slice(x[0], {Slice{std::nullopt, std::nullopt, -2}, Slice{2, 0, -1}});
      },
      {rand_tensor({5, 3}, 19)}));
}

TEST(Slice, SecondDerivativeFlowsThroughSliceGrad) {
  // d/dx of (dL/dx) where L = sum(slice(x)^3): the backward slice_grad is itself differentiable.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        Tensor xx = x[0];
        GradientTape inner;
        inner.watch(xx);
        Tensor y = slice(xx, {Slice{std::nullopt, std::nullopt, -2}});
        Tensor l = y * y * y;
        return inner.gradient(l, xx);
      },
      {rand_tensor({5}, 20)}));
}

// ---- operator[] -------------------------------------------------------------------------------
TEST(Index, PicksRowAndDropsAxisZero) {
  Tensor t = rand_tensor({3, 4}, 21);
  Tensor r = t[1];
  EXPECT_EQ(r.shape(), (Shape{4}));
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(r.at<double>({j}), t.at<double>({1, j}));
  EXPECT_TRUE(all_close(t[-1], t[2], 0, 0));
  EXPECT_EQ(t[0][2].shape(), Shape{});
  EXPECT_EQ(t[0][2].item<double>(), t.at<double>({0, 2}));
}

TEST(Index, IsAViewSharingStorage) {
  Tensor t = rand_tensor({3, 4}, 22);
  Tensor r = t[2];
  EXPECT_EQ(r.storage().get(), t.storage().get());
  poke(t, {2, 3}, 8.25);
  EXPECT_EQ(r.at<double>({3}), 8.25);
}

TEST(Index, RejectsOutOfRangeIndexAndScalars) {
  Tensor t = zeros({3, 4});
  EXPECT_ERROR_CONTAINS(t[3], "index", "3", "size 3");
  EXPECT_ERROR_CONTAINS(t[-4], "index", "-4", "size 3");
  EXPECT_ERROR_CONTAINS(scalar(1.0)[0], "index", "scalar");
}

// ---- squeeze / expand_dims --------------------------------------------------------------------
TEST(Squeeze, WithoutAxesDropsEveryUnitAxis) {
  Tensor t = rand_tensor({1, 3, 1, 2, 1}, 23);
  Tensor r = squeeze(t);
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(r, t.to_vector<double>(), 0, 0));
  EXPECT_EQ(squeeze(zeros({1, 1})).shape(), Shape{});
}

TEST(Squeeze, GivenAxesDropsOnlyThoseIncludingNegative) {
  Tensor t = rand_tensor({1, 3, 1, 2, 1}, 24);
  EXPECT_EQ(squeeze(t, {0}).shape(), (Shape{3, 1, 2, 1}));
  EXPECT_EQ(squeeze(t, {-1, 2}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(t.squeeze({-3}).shape(), (Shape{1, 3, 2, 1}));
}

TEST(Squeeze, IsAViewSharingStorage) {
  Tensor t = rand_tensor({1, 3}, 25);
  Tensor r = squeeze(t);
  EXPECT_EQ(r.storage().get(), t.storage().get());
  poke(t, {0, 1}, 3.0);
  EXPECT_EQ(r.at<double>({1}), 3.0);
}

TEST(Squeeze, RejectsAxisWhoseSizeIsNotOne) {
  EXPECT_ERROR_CONTAINS(squeeze(zeros({1, 3}), {1}), "squeeze", "axis 1", "size 3", "[1, 3]");
}

TEST(Squeeze, RejectsOutOfRangeAxis) {
  EXPECT_ERROR_CONTAINS(squeeze(zeros({1, 3}), {2}), "squeeze", "axis 2", "rank 2");
}

TEST(Squeeze, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return squeeze(x[0], {0, 2}); },
                              {rand_tensor({1, 3, 1, 2}, 26)}));
}

TEST(ExpandDims, InsertsUnitAxisAtPositiveAndNegativePositions) {
  Tensor t = rand_tensor({2, 3}, 27);
  EXPECT_EQ(expand_dims(t, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(t, 1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(expand_dims(t, 2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(t, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.expand_dims(-3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(scalar(1.0), 0).shape(), (Shape{1}));
  EXPECT_TRUE(all_close(expand_dims(t, 1), t.to_vector<double>(), 0, 0));
}

TEST(ExpandDims, IsAViewSharingStorage) {
  Tensor t = rand_tensor({2, 3}, 28);
  Tensor r = expand_dims(t, 1);
  EXPECT_EQ(r.storage().get(), t.storage().get());
  poke(t, {1, 1}, 6.0);
  EXPECT_EQ(r.at<double>({1, 0, 1}), 6.0);
}

TEST(ExpandDims, RejectsOutOfRangeAxis) {
  EXPECT_ERROR_CONTAINS(expand_dims(zeros({2, 3}), 3), "expand_dims", "axis 3");
  EXPECT_ERROR_CONTAINS(expand_dims(zeros({2, 3}), -4), "expand_dims", "axis -4");
}

TEST(ExpandDims, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return expand_dims(x[0], -2); },
                              {rand_tensor({2, 3}, 29)}));
}

// ---- broadcast_to -----------------------------------------------------------------------------
TEST(BroadcastTo, RepeatsValuesAlongStretchedAndNewAxes) {
  Tensor t = rand_tensor({3, 1}, 30);
  Tensor r = broadcast_to(t, {2, 3, 4});
  ASSERT_EQ(r.shape(), (Shape{2, 3, 4}));
  std::vector<double> v = t.to_vector<double>(), want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) want.push_back(v[std::size_t(b)]);
  EXPECT_TRUE(all_close(r, want, 0, 0));
}

TEST(BroadcastTo, ScalarFillsAnyShape) {
  Tensor r = broadcast_to(scalar(2.5, DType::f64), {2, 3});
  EXPECT_TRUE(all_close(r, std::vector<double>(6, 2.5), 0, 0));
  EXPECT_EQ(broadcast_to(scalar(1.0), {0, 3}).shape(), (Shape{0, 3}));
}

TEST(BroadcastTo, IsAZeroStrideViewSharingStorage) {
  Tensor t = rand_tensor({1, 3}, 31);
  Tensor r = broadcast_to(t, {4, 3});
  EXPECT_EQ(r.storage().get(), t.storage().get());
  EXPECT_EQ(r.strides()[0], 0);
  poke(t, {0, 2}, 1.75);
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(r.at<double>({i, 2}), 1.75);
}

TEST(BroadcastTo, OfNonContiguousInput) {
  Tensor base = rand_tensor({2, 1, 3}, 32);
  Tensor r = broadcast_to(noncontiguous(base), {2, 2, 3});
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(r.at<double>({i, j, k}), base.at<double>({i, 0, k}));
}

TEST(BroadcastTo, RejectsIncompatibleShape) {
  EXPECT_ERROR_CONTAINS(broadcast_to(zeros({2, 3}), {4, 3}), "broadcast_to", "[2, 3]", "[4, 3]");
  EXPECT_ERROR_CONTAINS(broadcast_to(zeros({2, 3}), {3}), "broadcast_to", "[2, 3]", "[3]");
}

TEST(BroadcastTo, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return broadcast_to(x[0], {2, 3, 4}); },
      {rand_tensor({3, 1}, 33)}));
}

// ---- contiguous / copy / clone ----------------------------------------------------------------
TEST(Contiguous, ReturnsSameTensorWhenAlreadyPacked) {
  Tensor t = rand_tensor({2, 3}, 34);
  Tensor c = contiguous(t);
  EXPECT_EQ(c.impl_ptr(), t.impl_ptr());
  EXPECT_EQ(t.contiguous().storage().get(), t.storage().get());
}

TEST(Contiguous, PacksNonContiguousViewIntoNewStorage) {
  Tensor t = rand_tensor({3, 4}, 35);
  Tensor v = transpose(t);
  Tensor c = contiguous(v);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), t.storage().get());
  EXPECT_EQ(c.strides(), (Strides{3, 1}));
  EXPECT_TRUE(all_close(c, v, 0, 0));
}

TEST(Copy, AlwaysMakesNewPackedStorage) {
  Tensor t = rand_tensor({2, 3}, 36);
  for (Tensor src : {t, noncontiguous(t), transpose(t)}) {
    Tensor c = copy(src);
    EXPECT_NE(c.storage().get(), src.storage().get());
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_TRUE(all_close(c, src, 0, 0));
  }
}

TEST(Copy, IsIndependentOfLaterWritesToTheSource) {
  Tensor t = rand_tensor({2, 3}, 37);
  Tensor c = t.clone();
  double before = c.at<double>({1, 1});
  poke(t, {1, 1}, 123.0);
  EXPECT_EQ(c.at<double>({1, 1}), before);
  poke(c, {0, 0}, -1.0);
  EXPECT_NE(t.at<double>({0, 0}), -1.0);
}

TEST(Copy, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return copy(x[0]) * x[0]; },
                              {rand_tensor({2, 3}, 38)}));
}

// ---- cast -------------------------------------------------------------------------------------
const std::vector<DType> kAllDTypes{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                                    DType::i64, DType::u8,  DType::boolean, DType::i8};

TEST(Cast, ConvertsBetweenEveryDTypePair) {
  // Small non-negative integers are exact in every dtype; bool keeps only zero vs non-zero.
  std::vector<double> vals{0, 1, 2, 5, 0, 127, 64, 3};
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      Tensor src = cast(constant(vals, {2, 4}), from);
      std::vector<double> want;
      for (double v : vals) {
        double s = from == DType::boolean ? double(v != 0) : v;
        want.push_back(to == DType::boolean ? double(s != 0) : s);
      }
      Tensor r = cast(src, to);
      ASSERT_EQ(r.dtype(), to);
      EXPECT_EQ(r.shape(), (Shape{2, 4}));
      EXPECT_TRUE(all_close(r, want, 0, 0)) << dtype_name(from) << " -> " << dtype_name(to);
      EXPECT_TRUE(all_close(cast(noncontiguous(src), to), want, 0, 0))
          << "non-contiguous " << dtype_name(from) << " -> " << dtype_name(to);
    }
}

TEST(Cast, ToSameDTypeReturnsTheTensorItself) {
  Tensor t = rand_tensor({2}, 39);
  EXPECT_EQ(cast(t, DType::f64).impl_ptr(), t.impl_ptr());
}

TEST(Cast, FloatToIntegerTruncatesTowardZero) {
  Tensor t = constant<double>({2.7, -2.7, 0.5, -0.5, 100.99});
  EXPECT_TRUE(all_close(cast(t, DType::i32), {2, -2, 0, 0, 100}, 0, 0));
  EXPECT_TRUE(all_close(cast(t, DType::i64), {2, -2, 0, 0, 100}, 0, 0));
}

TEST(Cast, ToBoolIsTrueForAnyNonZero) {
  Tensor t = constant<double>({0.0, -0.0, 0.25, -3.0});
  EXPECT_TRUE(all_close(cast(t, DType::boolean), {0, 0, 1, 1}, 0, 0));
}

TEST(Cast, ToF16RoundsToNearestEven) {
  const double u = std::ldexp(1.0, -10);  // f16 spacing in [1, 2)
  Tensor t = constant<float>({float(1 + u / 2), float(1 + 3 * u / 2), float(1 + u / 4),
                              float(1 + 3 * u / 4), 65504.0f, 1e-8f});
  Tensor r = cast(t, DType::f16);
  // Ties go to the even mantissa; 1e-8 is below half the smallest subnormal (2^-24).
  EXPECT_TRUE(all_close(r, {1.0, 1 + 2 * u, 1.0, 1 + u, 65504.0, 0.0}, 0, 0));
}

TEST(Cast, ToF16OverflowsToInfinity) {
  Tensor r = cast(constant<float>({70000.0f, -70000.0f}), DType::f16);
  std::vector<double> v = r.to_vector<double>();
  EXPECT_TRUE(std::isinf(v[0]) && v[0] > 0);
  EXPECT_TRUE(std::isinf(v[1]) && v[1] < 0);
}

TEST(Cast, ToBF16RoundsToNearestEven) {
  const double u = std::ldexp(1.0, -7);  // bf16 spacing in [1, 2)
  Tensor t = constant<float>({float(1 + u / 2), float(1 + 3 * u / 2), float(1 + u / 4),
                              float(1 + 3 * u / 4), 3.0e38f});
  Tensor r = cast(t, DType::bf16);
  std::vector<double> v = r.to_vector<double>();
  EXPECT_EQ(v[0], 1.0);
  EXPECT_EQ(v[1], 1 + 2 * u);
  EXPECT_EQ(v[2], 1.0);
  EXPECT_EQ(v[3], 1 + u);
  EXPECT_NEAR(v[4], 3.0e38, 3.0e38 * u);
}

// A double just above an f16 halfway point must round up; rounding it to f32 first lands
// exactly on the halfway point and then rounds to even (down): double rounding.
TEST(Cast, F64ToF16RoundsOnceNotTwice) {
  const double u = std::ldexp(1.0, -10);
  Tensor t = constant<double>({1 + u / 2 + std::ldexp(1.0, -40)});
  EXPECT_TRUE(all_close(cast(t, DType::f16), {1 + u}, 0, 0));
}

TEST(Cast, GradientThroughF32AndBackMatchesFiniteDifferences) {
  // f64 -> f32 -> f64: the gradient passes through both casts; the step is large because the
  // f32 round trip quantises the function.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return cast(cast(x[0], DType::f32), DType::f64) * 2.0; },
      {rand_tensor({2, 3}, 40)}, 1e-2, 1e-4));
}

TEST(Cast, GradientOfF64ToF64CastIsIdentity) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return cast(x[0], DType::f64) * x[0]; },
      {rand_tensor({4}, 41)}));
}

TEST(Cast, ToIntegerBlocksGradient) {
  Tensor x = rand_tensor({3}, 42, 1.0, 5.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = cast(cast(x, DType::i32), DType::f64);
  EXPECT_FALSE(tape.gradient(y, x).defined());
}

// ---- stop_gradient ----------------------------------------------------------------------------
TEST(StopGradient, ForwardIsIdentityView) {
  Tensor t = rand_tensor({2, 3}, 43);
  Tensor s = stop_gradient(t);
  EXPECT_TRUE(all_close(s, t, 0, 0));
  EXPECT_EQ(s.storage().get(), t.storage().get());
}

TEST(StopGradient, GradientIsUndefined) {
  Tensor x = rand_tensor({2, 3}, 44);
  GradientTape tape;
  tape.watch(x);
  Tensor y = stop_gradient(x) * 3.0;
  EXPECT_FALSE(tape.gradient(y, x).defined());
}

TEST(StopGradient, BlocksOnlyItsOwnPath) {
  // d/dx [x * stop_gradient(x)] = stop_gradient(x) = x.
  Tensor x = rand_tensor({4}, 45);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * stop_gradient(x);
  EXPECT_TRUE(all_close(tape.gradient(y, x), x, 1e-12, 0));
}

}  // namespace
}  // namespace soma

// Transposed layouts big enough for the tiled copy path (tiles of 32, ragged edges included).
namespace soma {
TEST(Contiguous, TiledTransposeCopyMatchesElementwiseReadsForAllWidths) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::u8}) {
    Tensor base = cast(soma::testing::rand_tensor({3, 70, 45}, 5, 0, 100), t);
    Tensor sliced = base.slice({Slice{1, std::nullopt, 1}, Slice{3, std::nullopt, 1}});  // offset
    Tensor v = sliced.permute({0, 2, 1});
    ASSERT_FALSE(v.is_contiguous());
    Tensor c = v.contiguous();
    ASSERT_TRUE(c.is_contiguous());
    ASSERT_EQ(c.shape(), (Shape{2, 45, 67}));
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t i = 0; i < 45; ++i)
        for (std::int64_t j = 0; j < 67; ++j)
          ASSERT_EQ(c.at<double>({a, i, j}), base.at<double>({a + 1, j + 3, i})) << dtype_name(t);
  }
}
}  // namespace soma
