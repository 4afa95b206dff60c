#ifdef SOMA_HAS_ONNX
#include "onnx/proto_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <optional>

#include "soma/autograd.hpp"
#include "soma/error.hpp"
#include "soma/input_limits.hpp"

namespace soma::onnx_detail {

using TP = ::onnx::TensorProto;

ElemType elem_type_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return TP::FLOAT;
    case DType::f64: return TP::DOUBLE;
    case DType::f16: return TP::FLOAT16;
    case DType::bf16: return TP::BFLOAT16;
    case DType::i32: return TP::INT32;
    case DType::i64: return TP::INT64;
    case DType::u8: return TP::UINT8;
    case DType::i8: return TP::INT8;
    case DType::boolean: return TP::BOOL;
  }
  fail("onnx", "dtype ", dtype, " has no ONNX element type");
}

const char* elem_type_name(int t) {
  switch (t) {
    case TP::FLOAT: return "FLOAT";
    case TP::UINT8: return "UINT8";
    case TP::INT8: return "INT8";
    case TP::UINT16: return "UINT16";
    case TP::INT16: return "INT16";
    case TP::INT32: return "INT32";
    case TP::INT64: return "INT64";
    case TP::STRING: return "STRING";
    case TP::BOOL: return "BOOL";
    case TP::FLOAT16: return "FLOAT16";
    case TP::DOUBLE: return "DOUBLE";
    case TP::UINT32: return "UINT32";
    case TP::UINT64: return "UINT64";
    case TP::BFLOAT16: return "BFLOAT16";
    default: break;
  }
  // The newer ones (FLOAT8E4M3FN, INT4, ...) by their names in onnx.proto, or ONNX's numbers
  // where soma was built with an older onnx.proto.
  if (::onnx::TensorProto_DataType_IsValid(t))
    return ::onnx::TensorProto_DataType_Name(TP::DataType(t)).c_str();
  switch (t) {
    case 17: return "FLOAT8E4M3FN";
    case 18: return "FLOAT8E4M3FNUZ";
    case 19: return "FLOAT8E5M2";
    case 20: return "FLOAT8E5M2FNUZ";
    case 21: return "UINT4";
    case 22: return "INT4";
    case 23: return "FLOAT4E2M1";
    case 24: return "FLOAT8E8M0";
    case 25: return "UINT2";
    case 26: return "INT2";
    default: return "UNKNOWN";
  }
}

int narrow_int_bits(int t, bool* is_signed) {
  if (is_signed) *is_signed = t == 22 || t == 26;
  return t == 21 || t == 22 ? 4 : t == 25 || t == 26 ? 2 : 0;
}

namespace {
// uz: NaN is 0x80, no -0 (the FNUZ types); else NaN is S.1111.111 (E4M3FN) or an all-ones
// exponent with a mantissa (E5M2); FLOAT4E2M1 (4 bits) has no NaN.
struct Float8 {
  int bits, mbits, bias;
  double max;
  bool has_inf, uz;
};
const Float8* float8_of(int t) {
  static const Float8 k[] = {{8, 3, 7, 448.0, false, false},
                             {8, 3, 8, 240.0, false, true},
                             {8, 2, 15, 57344.0, true, false},
                             {8, 2, 16, 57344.0, false, true}};
  static const Float8 fp4 = {4, 1, 1, 6.0, false, false};
  return t >= 17 && t <= 20 ? &k[t - 17] : t == 23 ? &fp4 : nullptr;
}
double decode_float8(std::uint8_t b, const Float8& f) {
  const int ebits = f.bits - 1 - f.mbits;
  const bool neg = (b >> (f.bits - 1)) & 1;
  if (f.bits == 4) b &= 0x7;  // no NaN encoding to look for: the magnitude bits only
  const int e = (b >> f.mbits) & ((1 << ebits) - 1), m = b & ((1 << f.mbits) - 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (f.uz && b == 0x80) return nan;
  if (!f.uz && f.has_inf && e == (1 << ebits) - 1)
    return m ? nan : (neg ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
  if (f.bits == 8 && !f.uz && !f.has_inf && (b & 0x7f) == 0x7f) return nan;
  const double v = e == 0 ? std::ldexp(double(m), 1 - f.bias - f.mbits)
                          : std::ldexp(1.0 + std::ldexp(double(m), -f.mbits), e - f.bias);
  return neg ? -v : v;
}
}  // namespace

bool is_narrow_float(int t) { return float8_of(t) != nullptr; }

double round_to_narrow_float(double v, int t, bool saturate) {
  const Float8& f = *float8_of(t);
  const double inf = std::numeric_limits<double>::infinity();
  if (f.bits == 4) saturate = true;  // nothing else to overflow to
  const double over = f.has_inf ? inf : std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(v)) return f.bits == 4 ? -0.0 : v;
  const double a = std::fabs(v);
  double r;
  if (std::isinf(a)) {
    r = saturate ? f.max : over;
  } else {
    int k = 0;
    std::frexp(a, &k);  // a = [0.5, 1) * 2^k: its exponent is k - 1
    const int e = std::max(k - 1, 1 - f.bias);  // below the normals: the subnormals' quantum
    const double q = std::ldexp(1.0, e - f.mbits);
    r = std::nearbyint(a / q) * q;  // exact: a has 53 bits at most, q is a power of two
    if (r > f.max) r = saturate ? f.max : over;
  }
  if (r == 0.0 && f.uz) return 0.0;
  return std::signbit(v) ? -r : r;
}

DType soma_dtype(int t, const std::string& what) {
  bool is_signed = false;
  if (narrow_int_bits(t, &is_signed)) return is_signed ? DType::i8 : DType::u8;
  if (is_narrow_float(t)) return DType::f32;
  switch (t) {
    case TP::FLOAT: return DType::f32;
    case TP::DOUBLE: return DType::f64;
    case TP::FLOAT16: return DType::f16;
    case TP::BFLOAT16: return DType::bf16;
    case TP::INT32: return DType::i32;
    case TP::INT64: return DType::i64;
    case TP::UINT8: return DType::u8;
    case TP::INT8: return DType::i8;
    case TP::BOOL: return DType::boolean;
    default: break;
  }
  fail("onnx", what, ": element type ", elem_type_name(t), " (", t, ") is not supported by soma");
}

void to_proto(const Tensor& t, ElemType type, const std::string& name, TP& tp) {
  NoGradScope no_grad;
  const DType d = soma_dtype(type, name);
  Tensor c = t.dtype() == d ? t.contiguous() : t.cast(d).contiguous();
  tp.Clear();
  tp.set_name(name);
  tp.set_data_type(type);
  for (auto e : c.shape()) tp.add_dims(e);
  // ONNX raw_data is little-endian, as are the hosts soma runs on.
  tp.set_raw_data(static_cast<const char*>(c.raw_data()),
                  std::size_t(c.numel()) * dtype_size(d));
}

namespace {
template <class Src, class Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& f, Dst* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = Dst(f.Get(int(i)));
}
}  // namespace

namespace {
thread_local std::optional<std::string> external_folder;

// The bytes of an external-data tensor (TensorProto.external_data: location, offset, length),
// checked before anything is allocated: the path must stay inside the model's folder and the
// file must hold offset + length bytes.
void read_external(const TP& tp, const std::string& what, std::size_t bytes, void* out) {
  namespace fs = std::filesystem;
  std::string location;
  std::int64_t offset = 0, length = -1;
  auto number = [&](const std::string& key, const std::string& v) {
    std::size_t used = 0;
    long long x = -1;
    try {
      x = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || x < 0)
      fail("onnx", what, ": external_data ", key, " '", v, "' is not a non-negative integer");
    return std::int64_t(x);
  };
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number("offset", kv.value());
    else if (kv.key() == "length") length = number("length", kv.value());
    // "checksum" and others: not needed to read the data.
  }
  if (location.empty()) fail("onnx", what, ": external data without a 'location'");
  if (!external_folder)
    fail("onnx", what, " keeps its data in the external file '", location,
         "'; load the model from its file (onnx::load(path)) so that the file can be found");
  const fs::path folder = fs::weakly_canonical(fs::path(*external_folder));
  const fs::path rel(location);
  const fs::path file = fs::weakly_canonical(folder / rel);
  // Inside the folder: relative, and no "..", symbolic link or absolute path leading out of it.
  auto [f, p] = std::mismatch(folder.begin(), folder.end(), file.begin(), file.end());
  if (rel.is_absolute() || f != folder.end() || p == file.end())
    fail("onnx", what, ": external data file '", location, "' is outside the model's folder '",
         folder.string(), "'");
  if (length >= 0 && std::uint64_t(length) != bytes)
    fail("onnx", what, ": external data file '", location, "' gives length ", length,
         " bytes, but its shape and type need ", bytes);
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) fail("onnx", what, ": cannot open external data file '", file.string(), "': ", ec.message());
  if (std::uint64_t(offset) > size || size - std::uint64_t(offset) < bytes)
    fail("onnx", what, ": external data file '", file.string(), "' holds ", size,
         " bytes, fewer than offset ", offset, " + length ", bytes);
  std::ifstream in(file, std::ios::binary);
  in.seekg(std::streamoff(offset));
  if (!in || !in.read(static_cast<char*>(out), std::streamsize(bytes)))
    fail("onnx", what, ": could not read ", bytes, " bytes at offset ", offset,
         " of external data file '", file.string(), "'");
}
}  // namespace

ExternalDataFolder::ExternalDataFolder(std::string folder) {
  had_ = external_folder.has_value();
  if (had_) saved_ = *external_folder;
  external_folder = std::move(folder);
}
ExternalDataFolder::~ExternalDataFolder() {
  if (had_) external_folder = saved_;
  else external_folder.reset();
}

void inline_external_attributes(::onnx::GraphProto& g) {
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      auto inline_one = [&](TP& t) {
        if (t.data_location() != TP::EXTERNAL) return;
        Tensor v = from_proto(t);  // checked and read as an initialiser is
        const std::string name = t.name();  // to_proto clears t first
        to_proto(v, ElemType(t.data_type()), name, t);
      };
      if (a.has_t()) inline_one(*a.mutable_t());
      for (auto& t : *a.mutable_tensors()) inline_one(t);
      if (a.has_g()) inline_external_attributes(*a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) inline_external_attributes(sub);
    }
}

Tensor from_proto(const TP& tp) {
  const std::string what = "initializer '" + tp.name() + "'";
  const DType d = soma_dtype(tp.data_type(), what);
  // The shape is checked against the data the file holds before anything is allocated: dims of
  // [1000000, 1000000] with no data must not ask for 4 TB.
  Shape shape;
  std::int64_t n = 1;
  bool overflow = false;
  for (auto e : tp.dims()) shape.push_back(e);
  for (auto e : shape) {
    if (e < 0) fail("onnx", what, ": shape ", shape_str(shape), " has a negative dimension");
    overflow = overflow || __builtin_mul_overflow(n, e, &n);
  }
  if (overflow || n > limits::kMaxElementsFromFile)
    fail("onnx", what, ": shape ", shape_str(shape), " has more than ", limits::kMaxElementsFromFile,
         " elements (the limit for a tensor read from a file)");
  if (const Float8* f8 = float8_of(tp.data_type())) {  // a byte per value; FLOAT4E2M1 packed
    std::string bytes = tp.raw_data();
    if (!tp.has_raw_data())
      for (int i = 0; i < tp.int32_data_size(); ++i) bytes.push_back(char(tp.int32_data(i)));
    const std::int64_t per_byte = 8 / f8->bits;
    if (std::int64_t(bytes.size()) != (n + per_byte - 1) / per_byte)
      fail("onnx", what, ": holds ", bytes.size(), " bytes, but ", shape_str(shape), " of ",
           elem_type_name(tp.data_type()), " needs ", (n + per_byte - 1) / per_byte);
    Tensor t = Tensor::empty(shape, d);
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      const unsigned b =
          std::uint8_t(bytes[std::size_t(i / per_byte)]) >> (f8->bits * (i % per_byte));
      p[i] = float(decode_float8(std::uint8_t(b & ((1u << f8->bits) - 1u)), *f8));
    }
    return t;
  }
  bool is_signed = false;
  if (const int bits = narrow_int_bits(tp.data_type(), &is_signed)) {
    // Packed, the first element in the lowest bits of each byte; raw_data, or one byte per
    // int32_data value.
    const std::int64_t per_byte = 8 / bits, nbytes = (n + per_byte - 1) / per_byte;
    std::string packed;
    if (tp.has_raw_data()) {
      packed = tp.raw_data();
    } else {
      for (int i = 0; i < tp.int32_data_size(); ++i) packed.push_back(char(tp.int32_data(i)));
    }
    if (std::int64_t(packed.size()) != nbytes)
      fail("onnx", what, ": holds ", packed.size(), " bytes, but ", shape_str(shape), " of ",
           elem_type_name(tp.data_type()), " needs ", nbytes);
    Tensor t = Tensor::empty(shape, d);
    auto* p = static_cast<std::uint8_t*>(t.raw_data());
    const unsigned mask = (1u << bits) - 1u, sign = 1u << (bits - 1);
    for (std::int64_t i = 0; i < n; ++i) {
      unsigned v =
          (std::uint8_t(packed[std::size_t(i / per_byte)]) >> (bits * (i % per_byte))) & mask;
      if (is_signed && (v & sign)) v |= ~mask;  // sign-extend into the byte
      p[i] = std::uint8_t(v);
    }
    return t;
  }
  const std::size_t bytes = std::size_t(n) * dtype_size(d);
  if (tp.data_location() == TP::EXTERNAL) {
    if (d == DType::boolean && sizeof(bool) != 1) fail("onnx", what, ": bool needs 1-byte bools");
    Tensor t = Tensor::empty(shape, d);  // little-endian, as raw_data
    if (bytes) read_external(tp, what, bytes, t.raw_data());
    return t;
  }
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != bytes)
      fail("onnx", what, ": raw_data holds ", tp.raw_data().size(), " bytes, but ",
           shape_str(shape), " of ", d, " needs ", bytes);
    Tensor t = Tensor::empty(shape, d);
    if (bytes) std::memcpy(t.raw_data(), tp.raw_data().data(), bytes);
    return t;
  }
  auto need = [&](int have) {
    if (have != n)
      fail("onnx", what, ": holds ", have, " values, but its shape ", shape_str(shape), " needs ", n);
  };
  switch (tp.data_type()) {  // the value count first, then the allocation
    case TP::FLOAT: need(tp.float_data_size()); break;
    case TP::DOUBLE: need(tp.double_data_size()); break;
    case TP::INT64: need(tp.int64_data_size()); break;
    case TP::INT32:
    case TP::UINT8:
    case TP::INT8:
    case TP::BOOL:
    case TP::FLOAT16:
    case TP::BFLOAT16: need(tp.int32_data_size()); break;
    default: fail("onnx", what, ": unsupported element type");
  }
  Tensor t = Tensor::empty(shape, d);
  switch (tp.data_type()) {
    case TP::FLOAT: need(tp.float_data_size()); copy_field(tp.float_data(), t.data<float>(), n); break;
    case TP::DOUBLE: need(tp.double_data_size()); copy_field(tp.double_data(), t.data<double>(), n); break;
    case TP::INT64: need(tp.int64_data_size()); copy_field(tp.int64_data(), t.data<std::int64_t>(), n); break;
    case TP::INT32: need(tp.int32_data_size()); copy_field(tp.int32_data(), t.data<std::int32_t>(), n); break;
    case TP::UINT8: {
      need(tp.int32_data_size());
      auto* p = static_cast<std::uint8_t*>(t.raw_data());
      for (std::int64_t i = 0; i < n; ++i) p[i] = std::uint8_t(tp.int32_data(int(i)));
      break;
    }
    case TP::INT8: {
      need(tp.int32_data_size());
      auto* p = static_cast<std::int8_t*>(t.raw_data());
      for (std::int64_t i = 0; i < n; ++i) p[i] = std::int8_t(tp.int32_data(int(i)));
      break;
    }
    case TP::BOOL: {
      need(tp.int32_data_size());
      auto* p = static_cast<bool*>(t.raw_data());
      for (std::int64_t i = 0; i < n; ++i) p[i] = tp.int32_data(int(i)) != 0;
      break;
    }
    case TP::FLOAT16:
    case TP::BFLOAT16: {  // the 16 bits of each value sit in int32_data
      need(tp.int32_data_size());
      auto* p = static_cast<std::uint16_t*>(t.raw_data());
      for (std::int64_t i = 0; i < n; ++i) p[i] = std::uint16_t(tp.int32_data(int(i)));
      break;
    }
    default: fail("onnx", what, ": unsupported element type");
  }
  return t;
}

}  // namespace soma::onnx_detail
#endif  // SOMA_HAS_ONNX
