// Tensor printing, modelled on NumPy's array repr (numpy/core/arrayprint.py):
//
//   tensor([[1.  , 2.5 ],
//           [3.  , 4.25]], shape=[2, 2], dtype=f32)
//
// - the values as NumPy prints an array (nested brackets, columns aligned, rows wrapped at 75
//   characters), then the shape and the dtype; the shape is always given, so empty and scalar
//   tensors read alike: tensor([], shape=[0, 3], dtype=f32), tensor(3., shape=[], dtype=f32);
// - more than 1000 elements: every axis longer than 6 shows its first and last 3 entries
//   around "...";
// - floats as NumPy with precision 4: the shortest text that reads back as the same value of the
//   tensor's dtype, cut to at most 4 fractional digits, decimal points aligned ("1." for whole
//   numbers); scientific notation when a non-zero magnitude is >= 1e8 or < 1e-4, or when the
//   largest is more than 1000 times the smallest; nan, inf and -inf by name;
// - integers in decimal, bools as true/false, both right-aligned to the widest shown value;
// - an undefined handle prints as tensor(undefined).
// The value formatter is fitted to the shown elements only, like NumPy's.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>

#include "internal/dispatch.hpp"
#include "soma/tensor.hpp"

namespace soma {

namespace {

constexpr std::int64_t kSummaryThreshold = 1000;  // elements above which the middle is elided
constexpr std::int64_t kEdgeItems = 3;
constexpr std::size_t kLineWidth = 75;
constexpr int kMaxFraction = 4;  // NumPy's `precision`
const char* const kPrefix = "tensor(";

// A decimal: value = 0.d1d2d3... x 10^(exp + 1), i.e. d1.d2d3... x 10^exp.
struct Decimal {
  std::string digits;  // no leading zeros (except the single "0" of zero), no trailing zeros
  int exp = 0;
};

Decimal parse_scientific(const char* s) {  // "d.ddde[+-]xx", no sign
  Decimal d;
  const char* p = s;
  for (; *p && *p != 'e'; ++p)
    if (*p != '.') d.digits += *p;
  if (*p == 'e') d.exp = std::atoi(p + 1);
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  return d;
}

// The shortest decimal of |v| that reads back as the same value of dtype `t`.
Decimal shortest(double v, DType t) {
  v = std::abs(v);
  char buf[64];
  if (t == DType::f64 || t == DType::f32) {
    auto r = t == DType::f64
                 ? std::to_chars(buf, buf + 63, v, std::chars_format::scientific)
                 : std::to_chars(buf, buf + 63, float(v), std::chars_format::scientific);
    *r.ptr = '\0';
    return parse_scientific(buf);
  }
  // f16 / bf16: the fewest digits that round-trip through the 16-bit type.
  auto same = [&](double x) {
    return t == DType::f16 ? detail::convert<Half>(x).bits == detail::convert<Half>(v).bits
                           : detail::convert<BFloat16>(x).bits == detail::convert<BFloat16>(v).bits;
  };
  for (int p = 0; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p, v);
    if (same(std::strtod(buf, nullptr))) break;
  }
  return parse_scientific(buf);
}

// Rounds a decimal to at most `max_digits` significant digits via printf (exact rounding of v).
Decimal round_sig(double v, int max_digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", max_digits - 1, std::abs(v));
  return parse_scientific(buf);
}

struct Parts {  // one formatted finite float: sign + int part, fraction digits, exponent
  std::string int_part, frac;
  int exp = 0;
};

Parts positional(double v, DType t) {
  Decimal d = shortest(v, t);
  Parts out;
  int n = int(d.digits.size());
  if (n - 1 - d.exp > kMaxFraction) {  // more than 4 fractional digits: round to 4
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", kMaxFraction, std::abs(v));
    std::string s = buf;
    auto dot = s.find('.');
    out.int_part = s.substr(0, dot);
    out.frac = s.substr(dot + 1);
    while (!out.frac.empty() && out.frac.back() == '0') out.frac.pop_back();
  } else if (d.exp >= 0) {
    out.int_part = d.digits.substr(0, std::size_t(std::min(n, d.exp + 1)));
    if (d.exp + 1 > n) out.int_part += std::string(std::size_t(d.exp + 1 - n), '0');
    if (d.exp + 1 < n) out.frac = d.digits.substr(std::size_t(d.exp + 1));
  } else {
    out.int_part = "0";
    out.frac = std::string(std::size_t(-d.exp - 1), '0') + d.digits;
  }
  if (std::signbit(v)) out.int_part.insert(0, 1, '-');
  return out;
}

Parts scientific(double v, DType t) {
  Decimal d = shortest(v, t);
  if (int(d.digits.size()) > kMaxFraction + 1) d = round_sig(v, kMaxFraction + 1);
  Parts out;
  if (std::signbit(v)) out.int_part.push_back('-');
  out.int_part += d.digits[0];
  out.frac = d.digits.substr(1);
  out.exp = d.exp;
  return out;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// NumPy's FloatingFormat (floatmode "maxprec", precision 4, trim ".").
class FloatFormat {
 public:
  FloatFormat(const std::vector<double>& values, DType t) : dtype_(t) {
    std::vector<double> finite;
    bool any_nonfinite = false, neg_inf = false;
    for (double v : values) {
      if (std::isfinite(v))
        finite.push_back(v);
      else {
        any_nonfinite = true;
        if (std::isinf(v) && v < 0) neg_inf = true;
      }
    }
    double max_abs = 0, min_abs = INFINITY;
    for (double v : finite)
      if (v != 0) {
        max_abs = std::max(max_abs, std::abs(v));
        min_abs = std::min(min_abs, std::abs(v));
      }
    if (max_abs > 0) sci_ = max_abs >= 1e8 || min_abs < 1e-4 || max_abs / min_abs > 1e3;
    for (double v : finite) {
      Parts p = sci_ ? scientific(v, t) : positional(v, t);
      pad_left_ = std::max(pad_left_, p.int_part.size());
      frac_ = std::max(frac_, p.frac.size());
      if (sci_) exp_digits_ = std::max(exp_digits_, std::to_string(std::abs(p.exp)).size());
    }
    // Width right of the point: the fraction, plus "e+XX" in scientific notation.
    pad_right_ = sci_ ? frac_ + 2 + exp_digits_ : frac_;
    if (any_nonfinite) {
      std::size_t offset = pad_right_ + 1;
      std::size_t inf_len = 3 + (neg_inf ? 1 : 0);
      if (3 > offset) pad_left_ = std::max(pad_left_, 3 - offset);
      if (inf_len > offset) pad_left_ = std::max(pad_left_, inf_len - offset);
    }
  }

  std::string operator()(double v) const {
    if (!std::isfinite(v)) {
      const char* s = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
      return pad_left(s, pad_left_ + pad_right_ + 1);
    }
    if (sci_) {
      // Every mantissa gets the same number of digits (zeros appended), exponents equal width.
      Parts p = scientific(v, dtype_);
      std::string e = std::to_string(std::abs(p.exp));
      return pad_left(p.int_part, pad_left_) + "." + p.frac +
             std::string(frac_ - p.frac.size(), '0') + "e" + (p.exp < 0 ? "-" : "+") +
             std::string(exp_digits_ - e.size(), '0') + e;
    }
    // Positional: points aligned, fractions padded with spaces.
    Parts p = positional(v, dtype_);
    return pad_left(p.int_part, pad_left_) + "." + p.frac + std::string(frac_ - p.frac.size(), ' ');
  }

 private:
  DType dtype_;
  bool sci_ = false;
  std::size_t pad_left_ = 0, pad_right_ = 0, frac_ = 0, exp_digits_ = 2;
};

class Printer {
 public:
  explicit Printer(const Tensor& t) : t_(t), summarize_(t.numel() > kSummaryThreshold) {}

  std::string body() {
    // Fit the formatter on the shown values.
    std::vector<std::int64_t> offsets;
    visit(0, t_.offset(), offsets);
    DType dt = t_.dtype();
    const void* base = t_.storage()->data;
    if (is_floating(dt)) {
      std::vector<double> vals;
      for (auto o : offsets) vals.push_back(load_as_double(base, dt, o));
      FloatFormat f(vals, dt);
      format_ = [f, base, dt](std::int64_t o) { return f(load_as_double(base, dt, o)); };
    } else {
      std::vector<std::string> texts;
      auto text = [base, dt](std::int64_t o) -> std::string {
        return detail::dispatch_dtype(dt, [&]<class T>() -> std::string {
          T v = static_cast<const T*>(base)[o];
          if constexpr (std::is_same_v<T, bool>)
            return v ? "true" : "false";
          else if constexpr (std::is_integral_v<T>)
            return std::to_string(v);
          else
            return "?";  // floats are handled above
        });
      };
      std::size_t width = 0;
      for (auto o : offsets) width = std::max(width, text(o).size());
      format_ = [text, width](std::int64_t o) { return pad_left(text(o), width); };
    }
    std::string hanging(std::char_traits<char>::length(kPrefix) + 1, ' ');
    // The line ends in "," before the shape, as NumPy's does before the dtype.
    return recurse(0, t_.offset(), hanging, kLineWidth - 1);
  }

 private:
  // Indices shown along `axis`: all, or the edges when summarising (-1 marks the "...").
  std::vector<std::int64_t> shown(int axis) const {
    std::int64_t n = t_.shape()[std::size_t(axis)];
    std::vector<std::int64_t> idx;
    if (summarize_ && n > 2 * kEdgeItems) {
      for (std::int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);
      for (std::int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  void visit(int axis, std::int64_t offset, std::vector<std::int64_t>& out) const {
    if (axis == t_.rank()) {
      out.push_back(offset);
      return;
    }
    for (auto i : shown(axis))
      if (i >= 0) visit(axis + 1, offset + i * t_.strides()[std::size_t(axis)], out);
  }

  // NumPy's _extendLine: wrap before `word` when the line would grow past `width`, unless
  // wrapping would not help.
  static void extend(std::string& s, std::string& line, const std::string& word, std::size_t width,
                     const std::string& prefix) {
    if (line.size() + word.size() > width && line.size() > prefix.size()) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      s += line + "\n";
      line = prefix;
    }
    line += word;
  }

  // NumPy's _formatArray recursion: `hanging` is the indent of continuation lines.
  std::string recurse(int axis, std::int64_t offset, const std::string& hanging,
                      std::size_t width) {
    if (axis == t_.rank()) return format_(offset);
    const std::string next_hanging = hanging + " ";
    const std::size_t next_width = width - 1;  // room for this level's "]"
    const std::int64_t stride = t_.strides()[std::size_t(axis)];
    const auto idx = shown(axis);
    const int axes_left = int(t_.rank()) - axis;
    std::string s;
    if (axes_left == 1) {
      const std::size_t elem_width = width - 1;  // room for "," or "]"
      std::string line = hanging;
      for (std::size_t k = 0; k < idx.size(); ++k) {
        std::string word =
            idx[k] < 0 ? std::string("...")
                       : recurse(axis + 1, offset + idx[k] * stride, next_hanging, next_width);
        extend(s, line, word, elem_width, hanging);
        if (k + 1 < idx.size()) line += ", ";
      }
      s += line;
    } else {
      std::string sep(std::size_t(axes_left), '\n');  // "," then a blank line per extra axis
      sep[0] = ',';
      for (std::size_t k = 0; k < idx.size(); ++k) {
        s += hanging;
        s += idx[k] < 0 ? std::string("...")
                        : recurse(axis + 1, offset + idx[k] * stride, next_hanging, next_width);
        if (k + 1 < idx.size()) s += sep;
      }
    }
    std::string out(1, '[');
    out.append(s, hanging.size());
    out.push_back(']');
    return out;
  }

  const Tensor& t_;
  bool summarize_;
  std::function<std::string(std::int64_t)> format_;
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  if (!device().is_cpu()) return to(Device::cpu()).str();
  std::string suffix = ", shape=" + shape_str(shape()) + ", dtype=" + dtype_name(dtype()) + ")";
  if (numel() == 0) return kPrefix + std::string("[]") + suffix;
  return kPrefix + Printer(*this).body() + suffix;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace soma
