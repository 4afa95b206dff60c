#include "soma/shape.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "soma/error.hpp"

namespace soma {

void Dims::throw_out_of_range() { throw std::out_of_range("Dims::at: index out of range"); }

std::int64_t numel(const Shape& s) {
  // An empty dimension makes the product 0 whatever the others are, and a product too large for
  // int64 saturates instead of wrapping around to a small size (found by fuzzing: a file's shape
  // [2^32, 2^32] must be refused as too large, not allocated as 0 bytes).
  for (auto d : s)
    if (d == 0) return 0;
  std::int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<std::int64_t>::max();
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    // Saturate: only a zero-size tensor can have extents this large, and its strides are unused.
    if (__builtin_mul_overflow(acc, std::max<std::int64_t>(s[i], 1), &acc))
      acc = std::numeric_limits<std::int64_t>::max();
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(op, "cannot broadcast ", shape_str(a), " with ", shape_str(b), ": dimension -",
           i + 1, " is ", da, " vs ", db);
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_axis(std::int64_t axis, std::int64_t rank, const char* op) {
  if (axis < -rank || axis >= rank || (rank == 0))
    fail(op, "axis ", axis, " is out of range for a tensor of rank ", rank, " (expected ",
         rank == 0 ? std::string("no axis for a scalar")
                   : "-" + std::to_string(rank) + " <= axis < " + std::to_string(rank),
         ")");
  return int(axis < 0 ? axis + rank : axis);
}

std::vector<int> normalize_axes(const std::vector<std::int64_t>& axes, std::int64_t rank,
                                const char* op) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (auto a : axes) out.push_back(normalize_axis(a, rank, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    fail(op, "repeated axis in the axis list for a tensor of rank ", rank);
  return out;
}

}  // namespace soma
