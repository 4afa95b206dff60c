// soma::Dims (Shape and Strides): the small-buffer vector that replaced std::vector<int64_t>
// (issue 5). Inline up to Dims::kInline entries, heap beyond; same interface as the vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <span>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace soma {
namespace {
using testing::all_close;

std::vector<std::int64_t> iota_vec(std::size_t n, std::int64_t from = 0) {
  std::vector<std::int64_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(SmallShape, ConstructorsMatchVector) {
  EXPECT_TRUE(Shape().empty());
  EXPECT_EQ(Shape(3), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(Shape(2, 7), (std::vector<std::int64_t>{7, 7}));
  EXPECT_EQ((Shape{4, 5, 6}), (std::vector<std::int64_t>{4, 5, 6}));
  const std::vector<std::int64_t> v{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(Shape(v), v);
  EXPECT_EQ(Shape(v.begin() + 1, v.begin() + 3), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(Shape(v.rbegin(), v.rend()).front(), 8);
  std::vector<std::int64_t> back = Shape{9, 8};  // implicit conversion to the vector
  EXPECT_EQ(back, (std::vector<std::int64_t>{9, 8}));
}

TEST(SmallShape, GrowsPastInlineCapacity) {
  Shape s;
  for (std::size_t n = 1; n <= 40; ++n) {
    s.push_back(std::int64_t(n - 1));
    ASSERT_EQ(s.size(), n);
    ASSERT_GE(s.capacity(), n);
    ASSERT_EQ(s, iota_vec(n)) << "after " << n << " push_backs";
  }
  // push_back of an element of the same object while it reallocates
  Shape t(Dims::kInline, 5);
  t.push_back(t[0]);
  EXPECT_EQ(t.size(), Dims::kInline + 1);
  EXPECT_EQ(t.back(), 5);
  s.resize(3);
  EXPECT_EQ(s, iota_vec(3));
  s.resize(9, -1);
  EXPECT_EQ(s[8], -1);
  EXPECT_EQ(s[2], 2);
}

TEST(SmallShape, CopiesAndMovesInlineAndHeap) {
  for (std::size_t n : {std::size_t(0), std::size_t(2), Dims::kInline, Dims::kInline + 1,
                        std::size_t(100)}) {
    const Shape a(iota_vec(n, 10));
    Shape b = a;
    EXPECT_EQ(b, a);
    b.push_back(1);  // the copy is independent
    EXPECT_EQ(a.size(), n);
    Shape c = std::move(b);
    EXPECT_EQ(c.size(), n + 1);
    EXPECT_TRUE(b.empty());  // NOLINT: moved-from is empty, and usable
    b.push_back(3);
    EXPECT_EQ(b, (Shape{3}));
    Shape d{1, 2};
    d = c;
    EXPECT_EQ(d, c);
    d = std::move(c);
    EXPECT_EQ(d.size(), n + 1);
    d = d;  // self-assignment keeps the entries
    EXPECT_EQ(d.size(), n + 1);
    Shape e{7};
    swap(d, e);
    EXPECT_EQ(d, (Shape{7}));
    EXPECT_EQ(e.size(), n + 1);
  }
}

TEST(SmallShape, EqualityAndOrdering) {
  EXPECT_EQ((Shape{1, 2}), (Shape{1, 2}));
  EXPECT_NE((Shape{1, 2}), (Shape{1, 2, 3}));
  EXPECT_NE((Shape{1, 2}), (Shape{2, 1}));
  EXPECT_TRUE((Shape{1, 2}) == (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE((std::vector<std::int64_t>{1, 2}) == (Shape{1, 2}));
  EXPECT_TRUE((Shape{1, 2}) < (Shape{1, 3}));
  EXPECT_TRUE((Shape{1}) < (Shape{1, 0}));
  std::map<Shape, int> m{{{2, 3}, 1}, {{2}, 2}};
  EXPECT_EQ(m.at({2, 3}), 1);
  // Heap and inline storage compare by value.
  Shape big(iota_vec(10));
  big.resize(2);
  EXPECT_EQ(big, (Shape{0, 1}));
}

TEST(SmallShape, IteratorsInsertErase) {
  Shape s{1, 2, 3};
  EXPECT_EQ(std::accumulate(s.begin(), s.end(), std::int64_t(0)), 6);
  EXPECT_EQ(*s.rbegin(), 3);
  std::reverse(s.begin(), s.end());
  EXPECT_EQ(s, (Shape{3, 2, 1}));
  s.insert(s.begin() + 1, 9);
  EXPECT_EQ(s, (Shape{3, 9, 2, 1}));
  s.insert(s.end(), {4, 5, 6, 7});  // past the inline capacity
  EXPECT_EQ(s, (Shape{3, 9, 2, 1, 4, 5, 6, 7}));
  s.insert(s.begin(), s.begin() + 6, s.end());  // a range from the same object
  EXPECT_EQ(s, (Shape{6, 7, 3, 9, 2, 1, 4, 5, 6, 7}));
  s.erase(s.begin(), s.begin() + 2);
  EXPECT_EQ(s, (Shape{3, 9, 2, 1, 4, 5, 6, 7}));
  s.erase(s.begin() + 1);
  EXPECT_EQ(s, (Shape{3, 2, 1, 4, 5, 6, 7}));
  s.pop_back();
  EXPECT_EQ(s.back(), 6);
  std::span<const std::int64_t> view(s);
  EXPECT_EQ(view.size(), s.size());
  EXPECT_THROW(s.at(100), std::out_of_range);
  std::ostringstream os;
  os << Shape{5, 3};
  EXPECT_EQ(os.str(), "[5, 3]");
}

TEST(SmallShape, HugeRankTensorsAndBroadcasting) {
  // Rank 40 (heap storage) through the tensor machinery: views, reductions, broadcasting.
  Shape shape(40, 1);
  shape[3] = 2;
  shape[39] = 3;
  const Tensor t = random_uniform(shape, -1.0, 1.0, DType::f32, 7);
  EXPECT_EQ(t.shape(), shape);
  EXPECT_EQ(t.strides().size(), 40u);
  EXPECT_EQ(t.strides()[3], 3);
  const Tensor u = add(t, t);
  EXPECT_EQ(u.shape(), shape);
  EXPECT_TRUE(all_close(u, multiply(t, scalar(2.0f)), 1e-6, 1e-6));
  const Tensor sq = squeeze(t);
  EXPECT_EQ(sq.shape(), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes(Shape(12, 1), Shape{4, 5}), [] {
    Shape want(12, 1);
    want[10] = 4;
    want[11] = 5;
    return want;
  }());
}

}  // namespace
}  // namespace soma
