// Config fields (soma/nn/config.hpp) as JSON: one writer and one reader for every configurable
// class, so that a class's field list is the only place its config is spelled out.
#include <map>

#include "model/serialization_internal.hpp"
#include "soma/error.hpp"
#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/nn_ops.hpp"
#include "soma/optim/optimizer.hpp"

namespace soma::serialization::internal {

namespace {

// Initialisers by name. A file keeps only an initialiser's name: the weights are restored from
// the file, so its parameters matter only if the layer is re-initialised (docs/model-format.md).
const std::map<std::string, nn::Initializer (*)()>& initializers() {
  namespace I = nn::init;
  static const std::map<std::string, nn::Initializer (*)()> table = {
      {"zeros", [] { return I::zeros(); }},
      {"ones", [] { return I::ones(); }},
      {"constant", [] { return I::constant(0.0); }},
      {"random_normal", [] { return I::random_normal(); }},
      {"random_uniform", [] { return I::random_uniform(); }},
      {"truncated_normal", [] { return I::truncated_normal(); }},
      {"glorot_uniform", [] { return I::glorot_uniform(); }},
      {"glorot_normal", [] { return I::glorot_normal(); }},
      {"he_uniform", [] { return I::he_uniform(); }},
      {"he_normal", [] { return I::he_normal(); }},
      {"lecun_uniform", [] { return I::lecun_uniform(); }},
      {"lecun_normal", [] { return I::lecun_normal(); }},
      {"orthogonal", [] { return I::orthogonal(); }},
  };
  return table;
}

}  // namespace

bool known_initializer(const std::string& name) { return initializers().count(name) != 0; }

namespace {

json size2_json(Size2 s) { return json::array({s.h, s.w}); }
Size2 size2_from(const json& j) {
  if (j.is_number_integer()) return Size2(int_of(j));
  return Size2(int_of(j.at(0)), int_of(j.at(1)));
}

// A list of integers; a lone integer is a list of one (Keras writes an int or a list).
std::vector<std::int64_t> ints_from(const json& j) {
  std::vector<std::int64_t> out;
  if (j.is_array()) {
    for (auto& d : j) out.push_back(int_of(d));
  } else {
    out.push_back(int_of(j));
  }
  return out;
}

// nlohmann's messages start with "[json.exception.type_error.302] ".
std::string json_message(const json::exception& e) {
  const std::string w = e.what();
  const auto at = w.find("] ");
  return at == std::string::npos ? w : w.substr(at + 2);
}

}  // namespace

Shape shape_from_json(const json& j) {
  Shape s;
  for (auto d : ints_from(j)) s.push_back(d);
  return s;
}

DType dtype_from_name(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == dtype_name(DType(i))) return DType(i);
  fail("load_model", "unknown dtype '", s, "'");
}

// ---- writing ---------------------------------------------------------------------------------
void JsonWriter::field(const char* n, bool& v, nn::FieldRule) { out[n] = v; }
void JsonWriter::field(const char* n, int& v, nn::FieldRule) { out[n] = v; }
void JsonWriter::field(const char* n, std::int64_t& v, nn::FieldRule) { out[n] = v; }
void JsonWriter::field(const char* n, double& v, nn::FieldRule) { out[n] = v; }
void JsonWriter::field(const char* n, std::string& v, nn::FieldRule) { out[n] = v; }
void JsonWriter::field(const char* n, std::optional<double>& v, nn::FieldRule) {
  out[n] = v ? json(*v) : json(nullptr);
}
void JsonWriter::field(const char* n, std::optional<std::int64_t>& v, nn::FieldRule) {
  out[n] = v ? json(*v) : json(nullptr);
}
void JsonWriter::field(const char* n, std::optional<std::uint64_t>& v, nn::FieldRule) {
  out[n] = v ? json(*v) : json(nullptr);
}
void JsonWriter::field(const char* n, std::vector<double>& v, nn::FieldRule r) {
  out[n] = r.empty_is_null && v.empty() ? json(nullptr) : json(v);
}
void JsonWriter::field(const char* n, std::vector<std::int64_t>& v, nn::FieldRule r) {
  out[n] = r.empty_is_null && v.empty() ? json(nullptr) : json(v);
}
void JsonWriter::field(const char* n, std::optional<std::vector<std::int64_t>>& v, nn::FieldRule) {
  out[n] = v ? json(*v) : json(nullptr);
}
void JsonWriter::field(const char* n, Dims& v, nn::FieldRule) {
  out[n] = json(std::vector<std::int64_t>(v.begin(), v.end()));
}
void JsonWriter::field(const char* n, Size2& v, nn::FieldRule) { out[n] = size2_json(v); }
void JsonWriter::field(const char* n, std::optional<Size2>& v, nn::FieldRule) {
  out[n] = v ? size2_json(*v) : json(nullptr);
}
void JsonWriter::field(const char* n, Padding& v, nn::FieldRule) {
  if (v.mode() == Padding::Mode::explicit_) {
    auto& a = v.pads();
    out[n] = json::array({a[0], a[1], a[2], a[3]});
  } else {
    out[n] = v.str();
  }
}
void JsonWriter::field(const char* n, DType& v, nn::FieldRule) { out[n] = dtype_name(v); }
void JsonWriter::field(const char* n, nn::Activation& v, nn::FieldRule) {
  out[n] = v.is_linear() ? std::string("linear") : v.name;
}
void JsonWriter::field(const char* n, nn::Initializer& v, nn::FieldRule) { out[n] = json{{"class_name", v.name}}; }
void JsonWriter::field(const char* n, nn::Regularizer& v, nn::FieldRule) {
  out[n] = v.active() ? json{{"l1", v.l1}, {"l2", v.l2}} : json(nullptr);
}
void JsonWriter::field(const char* n, optim::LearningRate& v, nn::FieldRule) {
  out[n] = v.is_schedule() ? schedule_json(*v.schedule()) : json(v.at(0));
}
void JsonWriter::enum_field(const char* n, int& v, const nn::EnumNames& names, nn::FieldRule) {
  out[n] = names.names[std::size_t(v)];
}

// ---- reading ---------------------------------------------------------------------------------
void JsonReader::bad(const char* n, const std::string& what) const {
  fail("load_model", where_, ": field '", n, "' ", what);
}

const json* JsonReader::value(const char* n, nn::FieldRule r) const {
  auto it = c_.find(n);
  if (it == c_.end()) {
    if (r.optional) return nullptr;
    bad(n, "is missing");
  }
  if (it->is_null() && r.optional) return nullptr;
  return &*it;
}

const json* JsonReader::nullable(const char* n) const {
  auto it = c_.find(n);
  return it == c_.end() ? nullptr : &*it;
}

template <class F>
void JsonReader::convert(const char* n, F&& read) const {
  try {
    read();
  } catch (const json::exception& e) {
    bad(n, "is wrong: " + limits::excerpt(json_message(e), limits::kMaxDetailChars));
  }
}

void JsonReader::field(const char* n, bool& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = j->get<bool>(); });
}
void JsonReader::field(const char* n, int& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = int_of<int>(*j); });
}
void JsonReader::field(const char* n, std::int64_t& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = int_of(*j); });
}
void JsonReader::field(const char* n, double& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = j->get<double>(); });
}
void JsonReader::field(const char* n, std::string& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = j->get<std::string>(); });
}
void JsonReader::field(const char* n, std::optional<double>& v, nn::FieldRule) {
  if (auto* j = nullable(n)) convert(n, [&] { v = j->is_null() ? std::nullopt : std::optional(j->get<double>()); });
}
void JsonReader::field(const char* n, std::optional<std::int64_t>& v, nn::FieldRule) {
  if (auto* j = nullable(n)) convert(n, [&] { v = j->is_null() ? std::nullopt : std::optional(int_of(*j)); });
}
void JsonReader::field(const char* n, std::optional<std::uint64_t>& v, nn::FieldRule) {
  if (auto* j = nullable(n))
    convert(n, [&] { v = j->is_null() ? std::nullopt : std::optional(int_of<std::uint64_t>(*j)); });
}
// A list that may be written as null (empty_is_null): `null` reads as empty.
const json* JsonReader::list(const char* n, nn::FieldRule r) const {
  if (!r.empty_is_null) return value(n, r);
  auto* j = nullable(n);
  if (!j && !r.optional) bad(n, "is missing");
  return j;
}
void JsonReader::field(const char* n, std::vector<double>& v, nn::FieldRule r) {
  if (auto* j = list(n, r))
    convert(n, [&] { v = j->is_null() ? std::vector<double>{} : j->get<std::vector<double>>(); });
}
void JsonReader::field(const char* n, std::vector<std::int64_t>& v, nn::FieldRule r) {
  if (auto* j = list(n, r)) convert(n, [&] { v = j->is_null() ? std::vector<std::int64_t>{} : ints_from(*j); });
}
void JsonReader::field(const char* n, std::optional<std::vector<std::int64_t>>& v, nn::FieldRule) {
  if (auto* j = nullable(n)) convert(n, [&] { v = j->is_null() ? std::nullopt : std::optional(ints_from(*j)); });
}
void JsonReader::field(const char* n, Dims& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = shape_from_json(*j); });
}
void JsonReader::field(const char* n, Size2& v, nn::FieldRule r) {
  if (auto* j = value(n, r)) convert(n, [&] { v = size2_from(*j); });
}
void JsonReader::field(const char* n, std::optional<Size2>& v, nn::FieldRule) {
  if (auto* j = nullable(n)) convert(n, [&] { v = j->is_null() ? std::nullopt : std::optional(size2_from(*j)); });
}
void JsonReader::field(const char* n, Padding& v, nn::FieldRule r) {
  if (auto* j = value(n, r))
    convert(n, [&] {
      v = j->is_string() ? Padding(j->get<std::string>())
                         : Padding(int_of(j->at(0)), int_of(j->at(1)), int_of(j->at(2)), int_of(j->at(3)));
    });
}
void JsonReader::field(const char* n, DType& v, nn::FieldRule r) {
  auto* j = value(n, r);
  if (!j || (r.other_types_ignored && !j->is_string())) return;
  std::string s;
  convert(n, [&] { s = j->get<std::string>(); });
  v = dtype_from_name(s);
}
void JsonReader::field(const char* n, nn::Activation& v, nn::FieldRule r) {
  std::string s;
  if (auto* j = value(n, r)) convert(n, [&] { s = j->get<std::string>(); });
  else return;
  v = nn::Activation(s);
}
void JsonReader::field(const char* n, nn::Initializer& v, nn::FieldRule r) {
  auto* j = value(n, r);
  if (!j) return;
  std::string s;
  convert(n, [&] { s = j->is_string() ? j->get<std::string>() : j->at("class_name").get<std::string>(); });
  auto it = initializers().find(s);
  // An unknown (custom) initialiser: the loaded weights replace its values.
  v = it == initializers().end() ? nn::init::zeros() : it->second();
}
void JsonReader::field(const char* n, nn::Regularizer& v, nn::FieldRule) {
  auto* j = nullable(n);
  if (!j) return;
  if (j->is_null()) {
    v = {};
    return;
  }
  convert(n, [&] { v = {j->value("l1", 0.0), j->value("l2", 0.0)}; });
}
void JsonReader::field(const char* n, optim::LearningRate& v, nn::FieldRule r) {
  // Version 1 stored a schedule as its value at save time (with "learning_rate_was_schedule").
  auto* j = value(n, r);
  if (!j) return;
  if (j->is_object()) {
    v = schedule_from_json(*j);
    return;
  }
  convert(n, [&] { v = j->get<double>(); });
}
void JsonReader::enum_field(const char* n, int& v, const nn::EnumNames& names, nn::FieldRule r) {
  auto* j = value(n, r);
  if (!j) return;
  std::string s;
  convert(n, [&] { s = j->get<std::string>(); });
  for (std::size_t i = 0; i < names.names.size(); ++i)
    if (s == names.names[i]) {
      v = int(i);
      return;
    }
  if (names.fallback >= 0) {
    v = names.fallback;
    return;
  }
  std::string known;
  for (auto* k : names.names) known += std::string(known.empty() ? "" : ", ") + k;
  bad(n, "is '" + limits::excerpt(s, limits::kMaxDetailChars) + "', not one of " + known);
}

}  // namespace soma::serialization::internal
