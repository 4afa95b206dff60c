// Linear algebra: matmul (NumPy's @: 1-d promotion, batch broadcasting, strided views, empty
// dims, several dtypes), tensordot, diag and trace, against naive loops; gradients in f64.
#include <array>
#include <functional>
#include <string>

#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::noncontiguous;
using soma::testing::rand_tensor;

namespace {

struct Ref {
  Shape shape;
  std::vector<double> values;
};

// NumPy's matmul written out: promote 1-d operands, broadcast the batch dims by hand, loop.
Ref naive_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  const std::int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const std::size_t r = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), r - ba.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  Shape batch(r);
  for (std::size_t i = 0; i < r; ++i) batch[i] = std::max(ba[i], bb[i]);
  std::int64_t nb = 1;
  for (auto d : batch) nb *= d;
  Ref out;
  out.values.assign(std::size_t(nb * m * n), 0.0);
  for (std::int64_t bi = 0; bi < nb; ++bi) {
    // batch index -> offsets of the a and b matrices (a size-1 dim stays at 0)
    std::int64_t rem = bi, ia = 0, ib = 0, mul_a = 1, mul_b = 1;
    for (std::size_t d = r; d-- > 0;) {
      std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      ia += (ba[d] == 1 ? 0 : idx) * mul_a;
      ib += (bb[d] == 1 ? 0 : idx) * mul_b;
      mul_a *= ba[d];
      mul_b *= bb[d];
    }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p)
          s += va[std::size_t(ia * m * k + i * k + p)] * vb[std::size_t(ib * k * n + p * n + j)];
        out.values[std::size_t(bi * m * n + i * n + j)] = s;
      }
  }
  out.shape = batch;
  if (!a_vec) out.shape.push_back(m);
  if (!b_vec) out.shape.push_back(n);
  return out;
}

::testing::AssertionResult matches_naive(const Tensor& a, const Tensor& b, double tol = 1e-10) {
  Tensor c = matmul(a, b);
  Ref ref = naive_matmul(a, b);
  if (c.shape() != ref.shape)
    return ::testing::AssertionFailure() << "matmul of " << shape_str(a.shape()) << " and "
                                         << shape_str(b.shape()) << " has shape "
                                         << shape_str(c.shape()) << ", expected "
                                         << shape_str(ref.shape);
  return all_close(c, ref.values, tol, tol);
}

using soma::testing::error_of;

Tensor swap_last(const Tensor& t) { return t.transpose(t.rank() - 2, t.rank() - 1); }

}  // namespace

// ---- matmul forward ----
TEST(Matmul, TwoDMatchesNaiveLoop) {
  for (auto [m, k, n] : {std::array<std::int64_t, 3>{3, 4, 5}, {1, 1, 1}, {7, 13, 2}, {16, 1, 9}}) {
    EXPECT_TRUE(matches_naive(rand_tensor({m, k}, 1), rand_tensor({k, n}, 2)));
  }
}

TEST(Matmul, FloatMatchesNaiveLoop) {
  Tensor a = rand_tensor({6, 5}, 3, -1, 1, DType::f32), b = rand_tensor({5, 4}, 4, -1, 1, DType::f32);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_TRUE(all_close(c, naive_matmul(a, b).values, 1e-5, 1e-5));
}

TEST(Matmul, LargeFloatThroughBlasMatchesNaiveLoop) {
  Tensor a = rand_tensor({130, 70}, 5, -1, 1, DType::f32), b = rand_tensor({70, 91}, 6, -1, 1, DType::f32);
  EXPECT_TRUE(all_close(matmul(a, b), naive_matmul(a, b).values, 1e-4, 1e-4));
}

TEST(Matmul, VectorTimesMatrixDropsTheRowDim) {
  Tensor a = rand_tensor({4}, 7), b = rand_tensor({4, 5}, 8);
  EXPECT_EQ(matmul(a, b).shape(), (Shape{5}));
  EXPECT_TRUE(matches_naive(a, b));
}

TEST(Matmul, MatrixTimesVectorDropsTheColumnDim) {
  Tensor a = rand_tensor({3, 4}, 9), b = rand_tensor({4}, 10);
  EXPECT_EQ(matmul(a, b).shape(), (Shape{3}));
  EXPECT_TRUE(matches_naive(a, b));
}

TEST(Matmul, VectorTimesVectorIsAScalarDot) {
  Tensor a = constant({1.0, 2.0, 3.0}), b = constant({4.0, -5.0, 6.0});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_DOUBLE_EQ(c.item<double>(), 4 - 10 + 18);
}

TEST(Matmul, BatchDimsBroadcast) {
  Tensor a = rand_tensor({2, 1, 3, 4}, 11), b = rand_tensor({5, 4, 6}, 12);
  EXPECT_EQ(matmul(a, b).shape(), (Shape{2, 5, 3, 6}));
  EXPECT_TRUE(matches_naive(a, b));
  EXPECT_TRUE(matches_naive(rand_tensor({3, 4}, 13), rand_tensor({2, 4, 5}, 14)));
  EXPECT_TRUE(matches_naive(rand_tensor({2, 3, 4}, 15), rand_tensor({4}, 16)));
  EXPECT_TRUE(matches_naive(rand_tensor({4}, 17), rand_tensor({2, 4, 5}, 18)));
  EXPECT_TRUE(matches_naive(rand_tensor({3, 1, 2, 3}, 19), rand_tensor({1, 4, 3, 2}, 20)));
}

TEST(Matmul, ManySmallMatricesMatchNaiveLoop) {
  Tensor a = rand_tensor({300, 5, 6}, 21, -1, 1, DType::f32);
  Tensor b = rand_tensor({300, 6, 7}, 22, -1, 1, DType::f32);
  EXPECT_TRUE(all_close(matmul(a, b), naive_matmul(a, b).values, 1e-5, 1e-5));
}

TEST(Matmul, TransposedViewsMatchNaiveLoop) {
  Tensor at = rand_tensor({4, 3}, 23).transpose();  // [3, 4], strides (1, 3)
  Tensor bt = rand_tensor({5, 4}, 24).transpose();  // [4, 5]
  Tensor a = rand_tensor({3, 4}, 25), b = rand_tensor({4, 5}, 26);
  EXPECT_FALSE(at.is_contiguous());
  EXPECT_TRUE(matches_naive(at, b));
  EXPECT_TRUE(matches_naive(a, bt));
  EXPECT_TRUE(matches_naive(at, bt));
  Tensor a3 = swap_last(rand_tensor({2, 4, 3}, 27)), b3 = swap_last(rand_tensor({2, 5, 4}, 28));
  EXPECT_TRUE(matches_naive(a3, b3));
}

TEST(Matmul, NonContiguousAndReversedViewsMatchNaiveLoop) {
  Tensor a = noncontiguous(rand_tensor({3, 4}, 29)), b = noncontiguous(rand_tensor({4, 5}, 30));
  EXPECT_TRUE(matches_naive(a, b));
  Tensor rev = rand_tensor({4, 5}, 31).slice(0, std::nullopt, std::nullopt, -1);  // negative stride
  EXPECT_TRUE(matches_naive(a, rev));
  Tensor bc = rand_tensor({1, 5}, 32).broadcast_to({4, 5});  // zero row stride
  EXPECT_TRUE(matches_naive(a, bc));
  EXPECT_TRUE(matches_naive(noncontiguous(rand_tensor({4}, 33)), b));
  EXPECT_TRUE(matches_naive(a, noncontiguous(rand_tensor({4}, 34))));
  Tensor af = noncontiguous(rand_tensor({2, 3, 4}, 35, -1, 1, DType::f32));
  Tensor bf = swap_last(rand_tensor({2, 5, 4}, 36, -1, 1, DType::f32));
  EXPECT_TRUE(all_close(matmul(af, bf), naive_matmul(af, bf).values, 1e-5, 1e-5));
}

// Products of more than a few thousand multiply-adds go to BLAS (smaller ones to a plain loop),
// so the layout handling (transposes, strides, broadcasting) is checked at this size as well.
TEST(Matmul, BlasSizedViewsAndBroadcastingMatchNaiveLoop) {
  const std::int64_t m = 20, k = 30, n = 25;
  Tensor a = rand_tensor({m, k}, 80), b = rand_tensor({k, n}, 81);
  Tensor at = rand_tensor({k, m}, 82).transpose(), bt = rand_tensor({n, k}, 83).transpose();
  EXPECT_TRUE(matches_naive(a, b));
  EXPECT_TRUE(matches_naive(at, b));
  EXPECT_TRUE(matches_naive(a, bt));
  EXPECT_TRUE(matches_naive(at, bt));
  EXPECT_TRUE(matches_naive(noncontiguous(a), noncontiguous(b)));
  EXPECT_TRUE(matches_naive(a, b.slice(0, std::nullopt, std::nullopt, -1)));
  EXPECT_TRUE(matches_naive(a, rand_tensor({1, n}, 84).broadcast_to({k, n})));
  EXPECT_TRUE(matches_naive(rand_tensor({200}, 85), rand_tensor({200, 40}, 86)));
  EXPECT_TRUE(matches_naive(rand_tensor({40, 200}, 87), noncontiguous(rand_tensor({200}, 88))));
  EXPECT_TRUE(matches_naive(rand_tensor({2, 1, m, k}, 89), swap_last(rand_tensor({3, n, k}, 90))));
  EXPECT_TRUE(matches_naive(rand_tensor({64, m, k}, 91), rand_tensor({64, k, n}, 92)));
  Tensor af = rand_tensor({m, k}, 93, -1, 1, DType::f32), bf = rand_tensor({n, k}, 94, -1, 1, DType::f32);
  EXPECT_TRUE(all_close(matmul(af, bf.transpose()), naive_matmul(af, bf.transpose()).values, 1e-5, 1e-5));
  Tensor ah = rand_tensor({m, k}, 95, -1, 1, DType::f16), bh = rand_tensor({k, n}, 96, -1, 1, DType::f16);
  Tensor ref = cast(constant(naive_matmul(ah, bh).values, {m, n}), DType::f16);
  EXPECT_TRUE(all_close(matmul(ah, bh), ref, 2e-2, 2e-2));
}

TEST(Matmul, ZeroInnerDimGivesZeros) {
  Tensor c = matmul(zeros({3, 0}, DType::f64), zeros({0, 5}, DType::f64));
  EXPECT_EQ(c.shape(), (Shape{3, 5}));
  EXPECT_TRUE(all_close(c, std::vector<double>(15, 0.0)));
  Tensor ci = matmul(zeros({2, 0}, DType::i32), zeros({0, 2}, DType::i32));
  EXPECT_TRUE(all_close(ci, std::vector<double>(4, 0.0)));
  Tensor dot = matmul(zeros({0}, DType::f32), zeros({0}, DType::f32));
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(dot.item<double>(), 0.0);
}

TEST(Matmul, EmptyRowsColumnsOrBatchGiveEmptyOutput) {
  EXPECT_EQ(matmul(zeros({0, 4}), zeros({4, 5})).shape(), (Shape{0, 5}));
  EXPECT_EQ(matmul(zeros({3, 4}), zeros({4, 0})).shape(), (Shape{3, 0}));
  EXPECT_EQ(matmul(zeros({0, 3, 4}), zeros({4, 5})).shape(), (Shape{0, 3, 5}));
}

TEST(Matmul, IntegerDtypesAreExact) {
  for (DType t : {DType::i32, DType::i64}) {
    Tensor a = cast(round(rand_tensor({2, 3, 4}, 37, -9, 9)), t);
    Tensor b = cast(round(rand_tensor({4, 5}, 38, -9, 9)), t);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_TRUE(all_close(c, naive_matmul(a, b).values, 0, 0));
    Tensor at = swap_last(cast(round(rand_tensor({2, 4, 3}, 39, -9, 9)), t));
    EXPECT_TRUE(all_close(matmul(at, b), naive_matmul(at, b).values, 0, 0));
  }
}

TEST(Matmul, HalfPrecisionComputesInFloat) {
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor a = rand_tensor({5, 6}, 40, -1, 1, t), b = rand_tensor({6, 3}, 41, -1, 1, t);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), t);
    // The reference rounds the exact result to the 16-bit type too.
    Tensor ref = cast(constant(naive_matmul(a, b).values, {5, 3}), t);
    EXPECT_TRUE(all_close(c, ref, 2e-2, 2e-2)) << dtype_name(t);
  }
}

TEST(Matmul, MixedDtypesPromote) {
  Tensor a = rand_tensor({2, 3}, 42, -1, 1, DType::f32), b = rand_tensor({3, 2}, 43);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::f64);
  EXPECT_TRUE(all_close(c, naive_matmul(cast(a, DType::f64), b).values, 1e-12, 1e-12));
  EXPECT_EQ(matmul(ones({2, 2}, DType::i32), ones({2, 2}, DType::f32)).dtype(),
            promote_types(DType::i32, DType::f32));
}

// ---- matmul errors ----
TEST(Matmul, InnerDimensionMismatchNamesBothShapes) {
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({4, 5})), Error);
  EXPECT_EQ(error_of([] { matmul(zeros({2, 3}), zeros({4, 5})); }),
            "matmul: inner dimensions differ: [2, 3] x [4, 5]");
  EXPECT_EQ(error_of([] { matmul(zeros({32, 784}), zeros({128, 10})); }),
            "matmul: inner dimensions differ: [32, 784] x [128, 10]");
  EXPECT_EQ(error_of([] { matmul(zeros({3}), zeros({4})); }),
            "matmul: inner dimensions differ: [3] x [4]");
}

TEST(Matmul, ScalarOperandIsRejected) {
  std::string msg = error_of([] { matmul(scalar(2.0), zeros({2, 2})); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[] x [2, 2]"), std::string::npos) << msg;
}

TEST(Matmul, UnbroadcastableBatchDimsAreRejected) {
  std::string msg = error_of([] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); });
  EXPECT_NE(msg.find("matmul: batch dimensions do not broadcast: [2, 3, 4] x [3, 4, 5]"),
            std::string::npos)
      << msg;
}

TEST(Matmul, BoolIsRejected) {
  std::string msg = error_of([] { matmul(ones({2, 2}, DType::boolean), ones({2, 2}, DType::boolean)); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bool"), std::string::npos) << msg;
}

// ---- matmul gradients ----
TEST(MatmulGrad, TwoD) {
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({3, 4}, 50), rand_tensor({4, 2}, 51)}));
}

TEST(MatmulGrad, VectorOperands) {
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({4}, 52), rand_tensor({4, 3}, 53)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({3, 4}, 54), rand_tensor({4}, 55)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({5}, 56), rand_tensor({5}, 57)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({2, 3, 4}, 58), rand_tensor({4}, 59)}));
}

TEST(MatmulGrad, BatchBroadcastIsSummedBack) {
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({2, 1, 3, 4}, 60), rand_tensor({5, 4, 2}, 61)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0], x[1]); },
                              {rand_tensor({3, 4}, 62), rand_tensor({2, 4, 5}, 63)}));
}

TEST(MatmulGrad, TransposedInputs) {
  EXPECT_TRUE(check_gradients([](auto& x) { return matmul(x[0].transpose(), x[1]); },
                              {rand_tensor({4, 3}, 64), rand_tensor({4, 2}, 65)}));
}

TEST(MatmulGrad, SecondDerivativeOfSquaredProduct) {
  // f(A) = sum((A @ B)^2): d/dA = 2 (A B) B^T, itself differentiable through matmul's grad.
  Tensor a = rand_tensor({2, 3}, 66), b = rand_tensor({3, 2}, 67);
  EXPECT_TRUE(check_gradients(
      [&](auto& x) {
        GradientTape inner;
        inner.watch(x[0]);
        Tensor y = sum(square(matmul(x[0], b)));
        return inner.gradient(y, x[0]);
      },
      {a}));
}

// ---- tensordot ----
TEST(Tensordot, IntegerAxesContractTrailingWithLeading) {
  Tensor a = rand_tensor({2, 3, 4}, 70), b = rand_tensor({3, 4, 5}, 71);
  Tensor c = tensordot(a, b, 2);
  ASSERT_EQ(c.shape(), (Shape{2, 5}));
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), ref(10, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int l = 0; l < 5; ++l)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) ref[std::size_t(i * 5 + l)] += va[std::size_t(i * 12 + j * 4 + k)] * vb[std::size_t(j * 20 + k * 5 + l)];
  EXPECT_TRUE(all_close(c, ref, 1e-12, 1e-12));
}

TEST(Tensordot, ZeroAxesIsAnOuterProduct) {
  Tensor a = rand_tensor({2, 3}, 72), b = rand_tensor({4}, 73);
  Tensor c = tensordot(a, b, 0);
  ASSERT_EQ(c.shape(), (Shape{2, 3, 4}));
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), ref;
  for (double x : va)
    for (double y : vb) ref.push_back(x * y);
  EXPECT_TRUE(all_close(c, ref, 1e-12, 1e-12));
}

TEST(Tensordot, ExplicitAxisListsInAnyOrder) {
  Tensor a = rand_tensor({3, 4, 2}, 74), b = rand_tensor({4, 5, 3}, 75);
  Tensor c = tensordot(a, b, {0, 1}, {2, 0});  // a's axis 0 with b's 2, a's 1 with b's 0
  ASSERT_EQ(c.shape(), (Shape{2, 5}));
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), ref(10, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k)
        for (int l = 0; l < 5; ++l)
          ref[std::size_t(k * 5 + l)] += va[std::size_t(i * 8 + j * 2 + k)] * vb[std::size_t(j * 15 + l * 3 + i)];
  EXPECT_TRUE(all_close(c, ref, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(tensordot(a, b, {-3, -2}, {-1, 0}), c, 1e-12, 1e-12));
}

TEST(Tensordot, MatchesMatmulForMatrices) {
  Tensor a = rand_tensor({3, 4}, 76), b = rand_tensor({4, 5}, 77);
  EXPECT_TRUE(all_close(tensordot(a, b, 1), matmul(a, b), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(tensordot(a.transpose(), b, {0}, {0}), matmul(a, b), 1e-12, 1e-12));
}

TEST(Tensordot, MismatchedContractedDimsNameOpAndShapes) {
  std::string msg = error_of([] { tensordot(zeros({2, 3}), zeros({4, 5}), {1}, {0}); });
  EXPECT_NE(msg.find("tensordot"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 5]"), std::string::npos) << msg;
  EXPECT_THROW(tensordot(zeros({2, 3}), zeros({3}), 2), Error);
  EXPECT_THROW(tensordot(zeros({2, 3}), zeros({3, 2}), {0, 1}, {1}), Error);
  EXPECT_THROW(tensordot(zeros({2, 3}), zeros({3, 2}), {1, 1}, {0, 0}), Error);
}

TEST(TensordotGrad, AxesListsAndIntegerForm) {
  EXPECT_TRUE(check_gradients([](auto& x) { return tensordot(x[0], x[1], {0, 1}, {2, 0}); },
                              {rand_tensor({3, 4, 2}, 78), rand_tensor({4, 5, 3}, 79)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return tensordot(x[0], x[1], 1); },
                              {rand_tensor({2, 3}, 80), rand_tensor({3, 2, 2}, 81)}));
}

// ---- diag and trace ----
TEST(Diag, VectorBecomesSquareMatrix) {
  Tensor d = diag(constant({1.0, 2.0, 3.0}));
  EXPECT_EQ(d.shape(), (Shape{3, 3}));
  EXPECT_TRUE(all_close(d, {1, 0, 0, 0, 2, 0, 0, 0, 3}));
  Tensor di = diag(constant({4, 5}));
  EXPECT_EQ(di.dtype(), DType::i32);
  EXPECT_TRUE(all_close(di, {4, 0, 0, 5}));
  EXPECT_EQ(diag(zeros({0})).shape(), (Shape{0, 0}));
}

TEST(Diag, MatrixGivesItsMainDiagonal) {
  Tensor m = rand_tensor({4, 4}, 90);
  std::vector<double> v = m.to_vector<double>();
  EXPECT_TRUE(all_close(diag(m), {v[0], v[5], v[10], v[15]}, 0, 0));
  Tensor wide = rand_tensor({2, 5}, 91);
  std::vector<double> w = wide.to_vector<double>();
  EXPECT_TRUE(all_close(diag(wide), {w[0], w[6]}, 0, 0));
  Tensor tall = noncontiguous(rand_tensor({3, 2}, 92));
  std::vector<double> t = tall.to_vector<double>();
  EXPECT_TRUE(all_close(diag(tall), {t[0], t[3]}, 0, 0));
}

TEST(Diag, OtherRanksAreRejected) {
  std::string msg = error_of([] { diag(zeros({2, 2, 2})); });
  EXPECT_NE(msg.find("diag"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 2, 2]"), std::string::npos) << msg;
  EXPECT_THROW(diag(scalar(1.0)), Error);
}

TEST(DiagGrad, BothDirections) {
  EXPECT_TRUE(check_gradients([](auto& x) { return diag(x[0]); }, {rand_tensor({4}, 93)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return diag(x[0]); }, {rand_tensor({3, 3}, 94)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return diag(x[0]); }, {rand_tensor({2, 4}, 95)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return diag(x[0]); }, {rand_tensor({4, 2}, 96)}));
}

TEST(Trace, SumsTheMainDiagonal) {
  Tensor m = rand_tensor({3, 3}, 97);
  std::vector<double> v = m.to_vector<double>();
  Tensor t = trace(m);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_NEAR(t.item<double>(), v[0] + v[4] + v[8], 1e-12);
  EXPECT_NEAR(trace(rand_tensor({2, 3}, 98)).item<double>(),
              rand_tensor({2, 3}, 98).at<double>({0, 0}) + rand_tensor({2, 3}, 98).at<double>({1, 1}),
              1e-12);
  EXPECT_NEAR(trace(m.transpose()).item<double>(), v[0] + v[4] + v[8], 1e-12);
}

TEST(Trace, NonMatrixIsRejected) {
  std::string msg = error_of([] { trace(zeros({3})); });
  EXPECT_NE(msg.find("trace"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
}

TEST(TraceGrad, IsTheIdentity) {
  EXPECT_TRUE(check_gradients([](auto& x) { return trace(x[0]); }, {rand_tensor({3, 3}, 99)}));
  EXPECT_TRUE(check_gradients([](auto& x) { return trace(x[0]); }, {rand_tensor({2, 4}, 100)}));
}
