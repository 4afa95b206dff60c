#pragma once
// Shapes, strides and the NumPy broadcasting rule.
#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

namespace soma {

// A list of dimensions (extents or strides): the interface of std::vector<std::int64_t>, with
// room for kInline entries inside the object, so that shapes and strides of rank <= 6 cost no
// heap allocation (issue 5: Shape and Strides vectors were two of a tiny op's nine allocations).
// Converts implicitly to and from std::vector<std::int64_t>, so code written against the vector
// type keeps compiling.
class Dims {
 public:
  static constexpr std::size_t kInline = 6;
  using value_type = std::int64_t;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = std::int64_t&;
  using const_reference = const std::int64_t&;
  using pointer = std::int64_t*;
  using const_pointer = const std::int64_t*;
  using iterator = std::int64_t*;
  using const_iterator = const std::int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Dims() noexcept = default;
  explicit Dims(size_type n) { resize(n); }
  Dims(size_type n, const std::int64_t& v) { assign(n, v); }
  template <std::input_iterator It>
  Dims(It first, It last) { assign(first, last); }
  Dims(std::initializer_list<std::int64_t> il) { assign(il.begin(), il.end()); }
  Dims(const std::vector<std::int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit
  Dims(const Dims& o) { assign(o.begin(), o.end()); }
  Dims(Dims&& o) noexcept { steal(o); }
  ~Dims() { release(); }

  Dims& operator=(const Dims& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Dims& operator=(Dims&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  Dims& operator=(std::initializer_list<std::int64_t> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  Dims& operator=(const std::vector<std::int64_t>& v) {
    assign(v.begin(), v.end());
    return *this;
  }
  operator std::vector<std::int64_t>() const { return {begin(), end()}; }  // NOLINT: implicit

  void assign(size_type n, const std::int64_t& v) {
    const std::int64_t copy = v;  // v may point into this object
    clear();
    reserve(n);
    std::fill_n(data_, n, copy);
    size_ = n;
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::forward_iterator<It>) {
      reserve(size_type(std::distance(first, last)));
      for (; first != last; ++first) data_[size_++] = std::int64_t(*first);
    } else {
      for (; first != last; ++first) push_back(std::int64_t(*first));
    }
  }
  void assign(std::initializer_list<std::int64_t> il) { assign(il.begin(), il.end()); }

  // Element access.
  reference operator[](size_type i) { return data_[i]; }
  const_reference operator[](size_type i) const { return data_[i]; }
  reference at(size_type i) {
    if (i >= size_) throw_out_of_range();
    return data_[i];
  }
  const_reference at(size_type i) const {
    if (i >= size_) throw_out_of_range();
    return data_[i];
  }
  reference front() { return data_[0]; }
  const_reference front() const { return data_[0]; }
  reference back() { return data_[size_ - 1]; }
  const_reference back() const { return data_[size_ - 1]; }
  pointer data() noexcept { return data_; }
  const_pointer data() const noexcept { return data_; }

  // Iterators.
  iterator begin() noexcept { return data_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator cbegin() const noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator crbegin() const noexcept { return rbegin(); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  const_reverse_iterator crend() const noexcept { return rend(); }

  // Capacity.
  bool empty() const noexcept { return size_ == 0; }
  size_type size() const noexcept { return size_; }
  size_type max_size() const noexcept { return std::vector<std::int64_t>().max_size(); }
  size_type capacity() const noexcept { return cap_; }
  void reserve(size_type n) {
    if (n > cap_) grow_to(n);
  }
  void shrink_to_fit() noexcept {}

  // Modifiers.
  void clear() noexcept { size_ = 0; }
  void push_back(std::int64_t v) {  // by value: v may point into this object
    if (size_ == cap_) grow_to(cap_ * 2);
    data_[size_++] = v;
  }
  reference emplace_back(std::int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { --size_; }
  void resize(size_type n) { resize(n, 0); }
  void resize(size_type n, const std::int64_t& v) {
    const std::int64_t copy = v;
    if (n > size_) {
      reserve(n);
      std::fill(data_ + size_, data_ + n, copy);
    }
    size_ = n;
  }
  iterator insert(const_iterator pos, std::int64_t v) { return insert(pos, size_type(1), v); }
  iterator insert(const_iterator pos, size_type n, std::int64_t v) {
    const size_type at = open_gap(pos, n);
    std::fill_n(data_ + at, n, v);
    return data_ + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    // Copied first: the range may lie inside this object, which the gap would move.
    const Dims items(first, last);
    const size_type at = open_gap(pos, items.size());
    std::copy(items.begin(), items.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<std::int64_t> il) {
    return insert(pos, il.begin(), il.end());
  }
  iterator emplace(const_iterator pos, std::int64_t v) { return insert(pos, v); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_type a = size_type(first - data_), b = size_type(last - data_);
    std::copy(data_ + b, data_ + size_, data_ + a);
    size_ -= b - a;
    return data_ + a;
  }
  void swap(Dims& o) noexcept {
    Dims t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }
  friend void swap(Dims& a, Dims& b) noexcept { a.swap(b); }

  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::strong_ordering operator<=>(const Dims& a, const Dims& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool is_inline() const noexcept { return data_ == inline_; }
  void release() noexcept {
    if (!is_inline()) delete[] data_;
    data_ = inline_;
    size_ = 0;
    cap_ = kInline;
  }
  // Takes o's entries; leaves o empty (and inline).
  void steal(Dims& o) noexcept {
    if (o.is_inline()) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(std::int64_t));
      data_ = inline_;
      cap_ = kInline;
    } else {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  void grow_to(size_type n) {
    n = std::max(n, kInline * 2);
    auto* p = new std::int64_t[n];
    std::copy(data_, data_ + size_, p);
    if (!is_inline()) delete[] data_;
    data_ = p;
    cap_ = n;
  }
  // Makes room for n entries at pos; returns pos as an index.
  size_type open_gap(const_iterator pos, size_type n) {
    const size_type at = size_type(pos - data_);
    reserve(size_ + n);
    std::copy_backward(data_ + at, data_ + size_, data_ + size_ + n);
    size_ += n;
    return at;
  }
  [[noreturn]] static void throw_out_of_range();

  std::int64_t* data_ = inline_;
  size_type size_ = 0;
  size_type cap_ = kInline;
  std::int64_t inline_[kInline];
};

using Shape = Dims;
using Strides = Dims;  // in elements, not bytes

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
// Axis and index lists print the same way (they were the same type as Shape before).
inline std::ostream& operator<<(std::ostream& os, const std::vector<std::int64_t>& v) {
  return os << shape_str(Shape(v));
}

}  // namespace soma
