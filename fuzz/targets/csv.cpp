// Numeric CSV. The first byte picks the options (header, delimiter, label column and dtype), so
// the fuzzer explores them too; the rest is the file.
#include "fuzz_target.hpp"
#include "soma/data/csv.hpp"

namespace soma::fuzz {

void csv(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const std::uint8_t o = data[0];
  data::CsvOptions opt;
  opt.header = (o & 1) != 0;
  const char delims[4] = {',', ';', '\t', ' '};
  opt.delimiter = delims[(o >> 1) & 3];
  switch ((o >> 3) & 3) {
    case 0: break;
    case 1: opt.label_column = 0; break;
    case 2: opt.label_column = -1; break;
    case 3: opt.label_column = "label"; break;
  }
  const DType labels[4] = {DType::i64, DType::u8, DType::f32, DType::i32};
  opt.label_dtype = labels[(o >> 5) & 3];
  if (o & 0x80) opt.dtype = DType::f64;
  auto d = data::read_csv(memory_file(data + 1, size - 1), opt);
  (void)d.features.numel();
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::csv)
