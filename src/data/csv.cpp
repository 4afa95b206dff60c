// Numeric CSV reader: RFC 4180 quoting, CRLF, blank lines, an optional header and label column.
#include "soma/data/csv.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string_view>

#include "data/input_file.hpp"
#include "soma/error.hpp"
#include "soma/input_limits.hpp"
#include "soma/ops.hpp"

namespace soma::data {

namespace {

constexpr const char* kOp = "read_csv";
// Text files larger than this are not what this reader is for (it holds the whole file).
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";  // skipped at the start of a file

constexpr std::uint64_t kMaxCsvBytes = std::uint64_t(1) << 34;
// A row may have at most this many columns (2^20; spreadsheets stop at 16384).
constexpr std::size_t kMaxCsvColumns = std::size_t(1) << 20;

struct Record {
  std::vector<std::string> fields;
  std::int64_t line = 0;  // physical line the record starts on, 1-based
};

// Splits the text into records one at a time. Quoted fields may hold the delimiter, doubled
// quotes and line breaks; "\r\n" ends a line like "\n".
class CsvParser {
 public:
  CsvParser(std::string_view text, char delim, const std::string& path)
      : s_(text), delim_(delim), path_(path) {
    if (s_.starts_with(kUtf8Bom)) pos_ = kUtf8Bom.size();
  }

  // The next record that is not blank; false at the end of the text.
  bool next(Record& rec) {
    while (pos_ < s_.size()) {
      rec.fields.clear();
      rec.line = line_;
      parse_record(rec);
      bool blank = rec.fields.size() == 1 && trim(rec.fields[0]).empty() && !last_quoted_;
      if (!blank) return true;
    }
    return false;
  }

  static std::string_view trim(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r'))
      v.remove_suffix(1);
    return v;
  }

 private:
  void parse_record(Record& rec) {
    last_quoted_ = false;
    while (true) {
      std::string field;
      bool quoted = false;
      // Leading spaces before an opening quote are allowed.
      std::size_t p = pos_;
      while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
      if (p < s_.size() && s_[p] == '"') {
        quoted = true;
        pos_ = p + 1;
        const std::int64_t start_line = line_;
        while (true) {
          if (pos_ >= s_.size())
            fail(kOp, "'", path_, "' line ", start_line, ": a quoted field is not closed");
          char c = s_[pos_++];
          if (c == '"') {
            if (pos_ < s_.size() && s_[pos_] == '"') {
              field += '"';
              ++pos_;
            } else {
              break;
            }
          } else {
            if (c == '\n') ++line_;
            field += c;
          }
        }
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
        if (pos_ < s_.size() && s_[pos_] != delim_ && s_[pos_] != '\n')
          fail(kOp, "'", path_, "' line ", line_, ", column ", rec.fields.size() + 1,
               ": unexpected character '", s_[pos_], "' after a closing quote");
      } else {
        std::size_t end = pos_;
        while (end < s_.size() && s_[end] != delim_ && s_[end] != '\n') ++end;
        field.assign(s_.substr(pos_, end - pos_));
        pos_ = end;
      }
      if (rec.fields.size() >= kMaxCsvColumns)
        fail(kOp, "'", path_, "' line ", rec.line, " has more than ", kMaxCsvColumns,
             " columns (the limit for a row)");
      rec.fields.push_back(std::move(field));
      last_quoted_ = last_quoted_ || quoted;
      if (pos_ >= s_.size()) return;
      char c = s_[pos_++];
      if (c == '\n') {
        ++line_;
        return;
      }
      // c is the delimiter: another field follows (possibly empty, at the end of the line).
    }
  }

  std::string_view s_;
  char delim_;
  const std::string& path_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 1;
  bool last_quoted_ = false;
};

std::string quoted_names(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (std::size_t i = 0; i < names.size() && os.tellp() < std::streamoff(limits::kMaxEchoChars); ++i)
    os << (i ? ", " : "") << "'" << limits::excerpt(names[i], 40) << "'";
  std::string s = os.str();
  if (s.size() >= limits::kMaxEchoChars) s += "... (" + std::to_string(names.size()) + " columns)";
  return s;
}

// Parses a whole cell as a number; false when it is anything else (empty included).
bool parse_number(std::string_view cell, double& out) {
  cell = CsvParser::trim(cell);
  if (cell.empty()) return false;
  if (cell.front() == '+') cell.remove_prefix(1);  // from_chars refuses a leading '+'
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), out);
  return ec == std::errc() && end == cell.data() + cell.size();
}

// Integer range of an integral dtype, for checking class ids before conversion.
void integral_range(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::u8: lo = 0; hi = 255; return;
    case DType::i8: lo = -128; hi = 127; return;
    case DType::i32: lo = -2147483648.0; hi = 2147483647.0; return;
    case DType::boolean: lo = 0; hi = 1; return;
    default: lo = -9007199254740992.0; hi = 9007199254740992.0; return;  // exact in a double
  }
}

}  // namespace

CsvData read_csv(const std::string& path, const CsvOptions& options) {
  if (!is_floating(options.dtype))
    fail(kOp, "dtype ", dtype_name(options.dtype),
         " is not a floating type; features load as f32, f64, f16 or bf16");
  if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r')
    fail(kOp, "delimiter '", options.delimiter == '"' ? "\"" : "\\n", "' cannot separate fields");

  detail::InputFile file(path, kOp);
  const std::vector<std::uint8_t> bytes = file.read_all(kMaxCsvBytes);
  CsvParser parser(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   options.delimiter, path);

  Record rec;
  std::vector<std::string> names;
  std::int64_t width_line = 0;  // the line that fixed the number of columns
  bool have_first = parser.next(rec);
  if (options.header) {
    if (!have_first) fail(kOp, "'", path, "' is empty: expected a header row (or set header = false)");
    for (auto& f : rec.fields) names.emplace_back(CsvParser::trim(f));
    width_line = rec.line;
    have_first = parser.next(rec);
  } else if (have_first) {
    for (std::size_t i = 0; i < rec.fields.size(); ++i) names.push_back(std::to_string(i));
    width_line = rec.line;
  }
  if (names.empty())
    fail(kOp, "'", path, "' is empty: no rows to read");
  const std::int64_t cols = std::int64_t(names.size());

  // Resolve the label column.
  std::int64_t label = -1;
  const CsvColumn& lc = options.label_column;
  if (lc.name()) {
    if (!options.header)
      fail(kOp, "'", path, "': label column '", *lc.name(),
           "' is given by name but the file has no header (header = false); give its index");
    for (std::int64_t i = 0; i < cols; ++i)
      if (names[i] == *lc.name()) label = i;
    if (label < 0)
      fail(kOp, "'", path, "' has no column named '", limits::excerpt(*lc.name()), "'; its columns are ",
           quoted_names(names));
  } else if (lc.index()) {
    std::int64_t i = *lc.index();
    if (i < -cols || i >= cols)
      fail(kOp, "'", path, "': label column index ", i, " is out of range for ", cols,
           " columns (expected ", -cols, " <= index < ", cols, ")");
    label = i < 0 ? i + cols : i;
  }
  double label_lo = 0, label_hi = 0;
  const bool integral_labels = !is_floating(options.label_dtype);
  if (integral_labels) integral_range(options.label_dtype, label_lo, label_hi);

  std::vector<double> features, labels;
  std::int64_t rows = 0;
  for (bool more = have_first; more; more = parser.next(rec)) {
    if (std::int64_t(rec.fields.size()) != cols)
      fail(kOp, "'", path, "' line ", rec.line, " has ", rec.fields.size(), " fields, expected ",
           cols, " like ", options.header ? "the header" : "the first row", " (line ", width_line,
           ")");
    for (std::int64_t c = 0; c < cols; ++c) {
      double v;
      if (!parse_number(rec.fields[c], v)) {
        std::string_view cell = CsvParser::trim(rec.fields[c]);
        fail(kOp, "'", path, "' line ", rec.line, ", column ", c + 1,
             options.header ? " ('" + limits::excerpt(names[c]) + "')" : std::string(), ": ",
             cell.empty() ? std::string("empty cell") : "'" + limits::excerpt(cell) + "'",
             " is not a number", c == label ? " (label column)" : "");
      }
      if (c == label) {
        if (integral_labels && !(v == std::floor(v) && v >= label_lo && v <= label_hi))
          fail(kOp, "'", path, "' line ", rec.line, ", column ", c + 1, ": label ", v,
               " is not an integer class id representable as ", dtype_name(options.label_dtype),
               " (set label_dtype to a floating type for regression targets)");
        labels.push_back(v);
      } else {
        features.push_back(v);
      }
    }
    ++rows;
    if (features.size() > std::size_t(limits::kMaxElementsFromFile))
      fail(kOp, "'", path, "' line ", rec.line, ": more than ", limits::kMaxElementsFromFile,
           " feature values (the limit for a tensor read from a file)");
  }

  CsvData out;
  const std::int64_t fcols = label >= 0 ? cols - 1 : cols;
  out.features = constant(features, Shape{rows, fcols}).cast(options.dtype);
  for (std::int64_t c = 0; c < cols; ++c)
    if (c != label) out.feature_names.push_back(names[c]);
  if (label >= 0) {
    out.labels = constant(labels, Shape{rows}).cast(options.label_dtype);
    out.label_name = names[label];
  }
  return out;
}

}  // namespace soma::data
