#pragma once
// Numeric CSV files: one row per example, an optional header row, an optional label column.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "soma/dtype.hpp"
#include "soma/tensor.hpp"

namespace soma::data {

// A column chosen by header name or by index (negative indices count from the end). The default
// chooses no column.
class CsvColumn {
 public:
  CsvColumn() = default;
  CsvColumn(const char* name) : name_(name) {}           // NOLINT: reads like a keyword argument
  CsvColumn(std::string name) : name_(std::move(name)) {}  // NOLINT
  CsvColumn(int index) : index_(index) {}                 // NOLINT
  CsvColumn(std::int64_t index) : index_(index) {}        // NOLINT

  bool has_value() const { return name_.has_value() || index_.has_value(); }
  const std::optional<std::string>& name() const { return name_; }
  const std::optional<std::int64_t>& index() const { return index_; }

 private:
  std::optional<std::string> name_;
  std::optional<std::int64_t> index_;
};

struct CsvOptions {
  bool header = true;            // the first row names the columns
  char delimiter = ',';
  CsvColumn label_column = {};   // by name ("species") or index (0, -1); none: all are features
  DType dtype = DType::f32;      // of the features
  DType label_dtype = DType::i64;  // class ids; use a floating dtype for regression targets
};

struct CsvData {
  Tensor features;                         // [rows, columns without the label]
  Tensor labels;                           // [rows]; undefined when there is no label column
  std::vector<std::string> feature_names;  // from the header, or "0", "1", ... without one
  std::string label_name;                  // empty when there is no label column
};

// Reads a numeric CSV file. Fields may be quoted ("1,5" or "a ""quoted"" word"); CRLF line
// endings, blank lines and a missing final newline are accepted; spaces around numbers are
// ignored. Throws soma::Error naming the file and the line for: a row with a different number of
// fields than the first, a cell that is not a number (line and column), an unknown label column,
// a non-integer label when label_dtype is an integer type, an unterminated quote.
CsvData read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace soma::data
