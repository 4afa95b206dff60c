// einsum: forward against a naive loop over every label assignment, gradients in f64, and the
// messages for malformed equations.
#include <functional>
#include <map>
#include <string>

#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::noncontiguous;
using soma::testing::rand_tensor;

namespace {

// The definition of einsum, looped out: for every assignment of values to the labels, add the
// product of the operands' elements into the output element. Letters only; an explicit output
// is required; a dim of size 1 broadcasts (is read at index 0).
std::vector<double> naive_einsum(const std::string& eq, const std::vector<Tensor>& ops,
                                 Shape* out_shape) {
  const std::size_t arrow = eq.find("->");
  std::vector<std::string> terms(1);
  for (char c : eq.substr(0, arrow)) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  const std::string out = eq.substr(arrow + 2);
  std::map<char, std::int64_t> size;
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (std::size_t d = 0; d < terms[i].size(); ++d)
      size[terms[i][d]] = std::max(size[terms[i][d]], ops[i].shape()[d]);
  std::vector<char> letters;
  for (auto& [c, s] : size) letters.push_back(c);
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : ops) vals.push_back(t.to_vector<double>());
  out_shape->clear();
  std::int64_t out_n = 1;
  for (char c : out) {
    out_shape->push_back(size[c]);
    out_n *= size[c];
  }
  std::vector<double> result(std::size_t(out_n), 0.0);
  std::int64_t total = 1;
  for (char c : letters) total *= size[c];
  std::map<char, std::int64_t> idx;
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t rem = flat;
    for (std::size_t l = letters.size(); l-- > 0;) {
      idx[letters[l]] = rem % size[letters[l]];
      rem /= size[letters[l]];
    }
    double prod = 1.0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < terms[i].size(); ++d) {
        const std::int64_t dim = ops[i].shape()[d];
        off = off * dim + (dim == 1 ? 0 : idx[terms[i][d]]);
      }
      prod *= vals[i][std::size_t(off)];
    }
    std::int64_t o = 0;
    for (char c : out) o = o * size[c] + idx[c];
    result[std::size_t(o)] += prod;
  }
  return result;
}

::testing::AssertionResult matches_naive(const std::string& eq, const std::vector<Tensor>& ops,
                                         const std::string& naive_eq = "") {
  Shape shape;
  std::vector<double> ref = naive_einsum(naive_eq.empty() ? eq : naive_eq, ops, &shape);
  Tensor r = einsum(eq, ops);
  if (r.shape() != shape)
    return ::testing::AssertionFailure() << eq << ": shape " << shape_str(r.shape())
                                         << ", expected " << shape_str(shape);
  auto res = all_close(r, ref, 1e-10, 1e-10);
  if (!res) return res << " (" << eq << ")";
  return res;
}

using soma::testing::error_of;

::testing::AssertionResult mentions(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << p << "'";
  return ::testing::AssertionSuccess();
}

}  // namespace

// ---- forward ----
TEST(Einsum, MatrixProduct) {
  EXPECT_TRUE(matches_naive("ij,jk->ik", {rand_tensor({3, 4}, 1), rand_tensor({4, 5}, 2)}));
}

TEST(Einsum, BatchedMatrixProduct) {
  EXPECT_TRUE(matches_naive("bij,bjk->bik", {rand_tensor({2, 3, 4}, 3), rand_tensor({2, 4, 5}, 4)}));
  EXPECT_TRUE(matches_naive("bij,bkj->bik", {rand_tensor({2, 3, 4}, 5), rand_tensor({2, 5, 4}, 6)}));
  EXPECT_TRUE(matches_naive("ibj,jbk->bki", {rand_tensor({3, 2, 4}, 7), rand_tensor({4, 2, 5}, 8)}));
}

TEST(Einsum, TransposeIsAPermutation) {
  EXPECT_TRUE(matches_naive("ij->ji", {rand_tensor({3, 4}, 9)}));
  EXPECT_TRUE(matches_naive("ijk->kij", {rand_tensor({2, 3, 4}, 10)}));
}

TEST(Einsum, RepeatedIndexTakesTheDiagonal) {
  EXPECT_TRUE(matches_naive("ii->i", {rand_tensor({4, 4}, 11)}));
  EXPECT_TRUE(matches_naive("iji->ji", {rand_tensor({3, 2, 3}, 12)}));
  EXPECT_TRUE(matches_naive("iii->i", {rand_tensor({3, 3, 3}, 13)}));
}

TEST(Einsum, RepeatedIndexWithoutOutputIsTheTrace) {
  Tensor m = rand_tensor({4, 4}, 14);
  Tensor t = einsum("ii", {m});
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_TRUE(all_close(t, trace(m), 1e-12, 1e-12));
  EXPECT_TRUE(matches_naive("ii", {m}, "ii->"));
}

TEST(Einsum, ImplicitOutputIsSortedSingleLetters) {
  EXPECT_TRUE(matches_naive("i,i", {rand_tensor({5}, 15), rand_tensor({5}, 16)}, "i,i->"));
  EXPECT_TRUE(matches_naive("ij,jk", {rand_tensor({2, 3}, 17), rand_tensor({3, 4}, 18)}, "ij,jk->ik"));
  EXPECT_TRUE(matches_naive("ba", {rand_tensor({2, 3}, 19)}, "ba->ab"));
  EXPECT_TRUE(matches_naive("kj,ji", {rand_tensor({2, 3}, 20), rand_tensor({3, 4}, 21)}, "kj,ji->ik"));
}

TEST(Einsum, OuterProduct) {
  EXPECT_TRUE(matches_naive("i,j->ij", {rand_tensor({3}, 22), rand_tensor({4}, 23)}));
  EXPECT_TRUE(matches_naive("ij,k->ikj", {rand_tensor({2, 3}, 24), rand_tensor({4}, 25)}));
}

TEST(Einsum, ElementwiseProductKeepsSharedLabels) {
  EXPECT_TRUE(matches_naive("ij,ij->ij", {rand_tensor({3, 4}, 26), rand_tensor({3, 4}, 27)}));
  EXPECT_TRUE(matches_naive("bi,bi->b", {rand_tensor({5, 4}, 28), rand_tensor({5, 4}, 29)}));
}

TEST(Einsum, SumOverEverything) {
  EXPECT_TRUE(matches_naive("ijk->", {rand_tensor({2, 3, 4}, 30)}));
  EXPECT_TRUE(matches_naive("ijk->j", {rand_tensor({2, 3, 4}, 31)}));
}

TEST(Einsum, IndexInOneOperandOnlyIsSummedFirst) {
  EXPECT_TRUE(matches_naive("ij,k->i", {rand_tensor({2, 3}, 32), rand_tensor({4}, 33)}));
  EXPECT_TRUE(matches_naive("ij,jk->i", {rand_tensor({2, 3}, 34), rand_tensor({3, 4}, 35)}));
}

TEST(Einsum, ThreeOrMoreOperands) {
  EXPECT_TRUE(matches_naive("ij,jk,kl->il",
                            {rand_tensor({2, 3}, 36), rand_tensor({3, 4}, 37), rand_tensor({4, 5}, 38)}));
  EXPECT_TRUE(matches_naive("i,ij,j->",
                            {rand_tensor({3}, 39), rand_tensor({3, 4}, 40), rand_tensor({4}, 41)}));
  EXPECT_TRUE(matches_naive("ab,bc,ca,d->d", {rand_tensor({2, 3}, 42), rand_tensor({3, 4}, 43),
                                              rand_tensor({4, 2}, 44), rand_tensor({2}, 45)}));
}

TEST(Einsum, SizeOneDimsBroadcast) {
  EXPECT_TRUE(matches_naive("ij,jk->ik", {rand_tensor({2, 1}, 46), rand_tensor({3, 4}, 47)}));
  EXPECT_TRUE(matches_naive("ij,ij->ij", {rand_tensor({1, 4}, 48), rand_tensor({3, 1}, 49)}));
}

TEST(Einsum, EllipsisStandsForBroadcastLeadingDims) {
  Tensor a = rand_tensor({2, 3, 4}, 50), b = rand_tensor({2, 4, 5}, 51);
  EXPECT_TRUE(matches_naive("...ij,...jk->...ik", {a, b}, "zij,zjk->zik"));
  Tensor c = rand_tensor({2, 1, 3, 4}, 52), d = rand_tensor({5, 4, 6}, 53);
  EXPECT_TRUE(matches_naive("...ij,...jk->...ik", {c, d}, "yzij,zjk->yzik"));
  EXPECT_TRUE(all_close(einsum("...ij,...jk->...ik", {c, d}), matmul(c, d), 1e-12, 1e-12));
  EXPECT_TRUE(matches_naive("...ij,jk->...ik", {rand_tensor({3, 4}, 54), rand_tensor({4, 5}, 55)},
                            "ij,jk->ik"));
  EXPECT_TRUE(matches_naive("i...->...i", {rand_tensor({2, 3, 4}, 56)}, "iyz->yzi"));
  EXPECT_TRUE(matches_naive("...ii->...i", {rand_tensor({2, 3, 3}, 57)}, "zii->zi"));
  // implicit: the "..." dims come first
  EXPECT_TRUE(matches_naive("i...", {rand_tensor({2, 3}, 58)}, "iz->zi"));
}

TEST(Einsum, NonContiguousOperands) {
  Tensor a = noncontiguous(rand_tensor({3, 4}, 59));
  Tensor b = rand_tensor({5, 4}, 60).transpose();
  EXPECT_TRUE(matches_naive("ij,jk->ik", {a, b}));
  EXPECT_TRUE(matches_naive("ii->i", {noncontiguous(rand_tensor({3, 3}, 61))}));
}

TEST(Einsum, EmptyContractionGivesZeros) {
  Tensor r = einsum("ij,jk->ik", {zeros({2, 0}, DType::f64), zeros({0, 3}, DType::f64)});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(r, std::vector<double>(6, 0.0)));
  EXPECT_EQ(einsum("ij,jk->ik", {zeros({0, 2}), zeros({2, 3})}).shape(), (Shape{0, 3}));
}

TEST(Einsum, ScalarOperand) {
  Tensor s = scalar(3.0, DType::f64), v = rand_tensor({4}, 62);
  EXPECT_TRUE(all_close(einsum(",i->i", {s, v}), v * 3.0, 1e-12, 1e-12));
}

TEST(Einsum, IntegerAndMixedDtypes) {
  Tensor a = constant<int>({{1, 2}, {3, 4}}), b = constant<int>({{5, 6}, {7, 8}});
  Tensor r = einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(r.dtype(), DType::i32);
  EXPECT_TRUE(all_close(r, {19, 22, 43, 50}, 0, 0));
  Tensor f = einsum("ij,jk->ik", {cast(a, DType::f32), cast(b, DType::f64)});
  EXPECT_EQ(f.dtype(), DType::f64);
  EXPECT_TRUE(all_close(f, {19, 22, 43, 50}, 0, 0));
}

TEST(Einsum, SpacesAreIgnored) {
  EXPECT_TRUE(matches_naive(" ij , jk -> ik ", {rand_tensor({2, 3}, 63), rand_tensor({3, 4}, 64)},
                            "ij,jk->ik"));
}

// ---- gradients ----
struct GradCase {
  std::string eq;
  std::vector<Shape> shapes;
};

TEST(EinsumGrad, MatchesFiniteDifferences) {
  const std::vector<GradCase> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 2}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 2}}},
      {"ij->ji", {{3, 4}}},
      {"ii->i", {{3, 3}}},
      {"ii", {{3, 3}}},
      {"i,i", {{4}, {4}}},
      {"i,j->ij", {{3}, {2}}},
      {"...ij,...jk->...ik", {{2, 1, 2, 3}, {2, 3, 2}}},
      {"ijk->", {{2, 3, 2}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}},
      {"iji->j", {{2, 3, 2}}},
      {"ij,ij->i", {{3, 4}, {3, 4}}},
      {"ij,jk->ik", {{2, 1}, {3, 2}}},
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    std::vector<Tensor> in;
    for (const auto& s : c.shapes) in.push_back(rand_tensor(s, seed++));
    EXPECT_TRUE(check_gradients([&](auto& x) { return einsum(c.eq, x); }, in)) << c.eq;
  }
}

// ---- errors ----
TEST(EinsumErrors, MalformedEquation) {
  Tensor m = zeros({2, 2});
  for (const char* eq : {"ij->i-j", "i.j->ij", "i2->i", "ij-ji", "ij->j,i", "i......j"}) {
    std::string msg = error_of([&] { einsum(eq, {m}); });
    EXPECT_TRUE(mentions(msg, {"einsum", eq, "[2, 2]"})) << eq;
  }
}

TEST(EinsumErrors, OperandCountMismatch) {
  std::string msg = error_of([] { einsum("ij,jk->ik", {zeros({2, 3})}); });
  EXPECT_TRUE(mentions(msg, {"einsum", "ij,jk->ik", "2 operands", "1 was given", "[2, 3]"}));
  EXPECT_THROW(einsum("ij", {}), Error);
}

TEST(EinsumErrors, RankMismatch) {
  std::string msg = error_of([] { einsum("ijk->i", {zeros({2, 3})}); });
  EXPECT_TRUE(mentions(msg, {"einsum", "ijk->i", "rank 2", "3 dims", "[2, 3]"}));
  EXPECT_THROW(einsum("ij...->i", {zeros({2})}), Error);
}

TEST(EinsumErrors, InconsistentSizesForOneLabel) {
  std::string msg = error_of([] { einsum("ij,jk->ik", {zeros({2, 3}), zeros({4, 5})}); });
  EXPECT_TRUE(mentions(msg, {"einsum", "ij,jk->ik", "label 'j'", "[2, 3], [4, 5]"}));
  EXPECT_THROW(einsum("ii->i", {zeros({2, 3})}), Error);
  std::string ell = error_of([] { einsum("...i,...i->...i", {zeros({2, 3}), zeros({4, 3})}); });
  EXPECT_TRUE(mentions(ell, {"einsum", "...", "[2, 3], [4, 3]"}));
}

TEST(EinsumErrors, BadOutputLabels) {
  EXPECT_TRUE(mentions(error_of([] { einsum("ij->ik", {zeros({2, 3})}); }),
                       {"einsum", "ij->ik", "'k'", "[2, 3]"}));
  EXPECT_TRUE(mentions(error_of([] { einsum("ij->ii", {zeros({2, 3})}); }),
                       {"einsum", "ij->ii", "'i'", "more than once"}));
  EXPECT_TRUE(mentions(error_of([] { einsum("ij->...ij", {zeros({2, 3})}); }),
                       {"einsum", "..."}));
}

TEST(EinsumErrors, BoolIsRejected) {
  EXPECT_TRUE(mentions(error_of([] { einsum("i,i", {ones({2}, DType::boolean), ones({2}, DType::boolean)}); }),
                       {"einsum", "bool"}));
}
