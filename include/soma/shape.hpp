#pragma once
// Shapes, strides and the NumPy broadcasting rule.
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace soma {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;  // in elements, not bytes

std::int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[5, 3, 2]"
Strides contiguous_strides(const Shape& s);

// NumPy broadcasting: trailing dimensions compared, 1 stretches, missing leading dims count as 1.
// Throws "<op>: cannot broadcast [5, 3, 2] with [5, 2]: dimension -2 is 3 vs 5".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// Maps a possibly negative axis into [0, rank); throws naming the op when out of range.
int normalize_axis(std::int64_t axis, std::int64_t rank, const char* op);
// Normalises a list of axes; empty means "all axes". Sorted, duplicates are an error.
std::vector<int> normalize_axes(const std::vector<std::int64_t>& axes, std::int64_t rank,
                                const char* op);

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

}  // namespace soma
