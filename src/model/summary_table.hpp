#pragma once
// The box-drawn table of summary() (Keras 3's look), and number formatting for it.
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace soma::model::detail {

// 101770 -> "101,770"
inline std::string thousands(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  int k = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it, ++k) {
    if (k && k % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
  }
  return v < 0 ? "-" + out : out;
}

// 407080 -> "397.54 KB" (powers of 1024, as Keras prints them).
inline std::string human_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

class SummaryTable {
 public:
  // `widths`: minimum text width of each column; numbers (column 2) are right-aligned.
  SummaryTable(std::vector<std::string> headers, std::vector<std::size_t> widths)
      : headers_(std::move(headers)), widths_(std::move(widths)) {
    for (std::size_t i = 0; i < headers_.size(); ++i)
      if (headers_[i].size() > widths_[i]) widths_[i] = headers_[i].size();
  }
  void add_row(std::vector<std::string> cells) {
    for (std::size_t i = 0; i < cells.size() && i < widths_.size(); ++i)
      if (cells[i].size() > widths_[i]) widths_[i] = cells[i].size();
    rows_.push_back(std::move(cells));
  }
  void print(std::ostream& os) const {
    rule(os, "┏", "━", "┳", "┓");
    line(os, headers_, "┃");
    rule(os, "┡", "━", "╇", "┩");
    for (auto& r : rows_) line(os, r, "│");
    rule(os, "└", "─", "┴", "┘");
  }

 private:
  void rule(std::ostream& os, const char* l, const char* h, const char* m, const char* r) const {
    os << l;
    for (std::size_t i = 0; i < widths_.size(); ++i) {
      for (std::size_t k = 0; k < widths_[i] + 2; ++k) os << h;
      os << (i + 1 < widths_.size() ? m : r);
    }
    os << "\n";
  }
  void line(std::ostream& os, const std::vector<std::string>& cells, const char* bar) const {
    os << bar;
    for (std::size_t i = 0; i < widths_.size(); ++i) {
      std::string c = i < cells.size() ? cells[i] : "";
      std::string pad(widths_[i] - c.size(), ' ');
      os << " " << (i == 2 ? pad + c : c + pad) << " " << bar;
    }
    os << "\n";
  }

  std::vector<std::string> headers_;
  std::vector<std::size_t> widths_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace soma::model::detail
