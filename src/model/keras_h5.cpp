// Keras weight files through HDF5 (soma/model/keras.hpp, docs/keras.md). Only this file sees the
// HDF5 headers; without HDF5 (SOMA_HAS_HDF5 unset) it says so.
//
// Keras 3 `.weights.h5`: /layers/<layer name>/vars/<0, 1, ...>, a layer's variables in creation
// order. Keras 2 `.h5` (save_weights, or save under /model_weights): a group per layer whose
// attribute weight_names lists its datasets ("dense/kernel:0", ...), in the same order.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/keras_internal.hpp"
#include "soma/error.hpp"
#include "soma/model/keras.hpp"
#include "soma/ops.hpp"

#ifdef SOMA_HAS_HDF5
#include <hdf5.h>
#endif

namespace soma::model {

#ifndef SOMA_HAS_HDF5

bool keras_weights_available() { return false; }

void load_keras_weights(Model&, const std::string& path) {
  fail("load_keras_weights", "reading '", path, "' is not available: this soma was built without ",
       "HDF5 (apt-get install libhdf5-dev and rebuild)");
}

#else

bool keras_weights_available() { return true; }

namespace {

constexpr const char* kOp = "load_keras_weights";

// An HDF5 handle closed on scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; soma reports its own errors instead.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Whether the path (relative to loc, components separated by '/') exists, checked one link at
// a time as HDF5 requires.
bool exists(hid_t loc, const std::string& path) {
  std::string at;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    at += (at.empty() ? "" : "/") + path.substr(start, end - start);
    if (H5Lexists(loc, at.c_str(), H5P_DEFAULT) <= 0) return false;
    start = end + 1;
  }
  return true;
}

std::vector<std::string> child_names(hid_t group) {
  std::vector<std::string> names;
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0) return names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) continue;
    std::string s(std::size_t(n) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT);
    s.resize(std::size_t(n));
    names.push_back(s);
  }
  return names;
}

// A string-list attribute (fixed-length or variable-length strings, as h5py writes them);
// nullopt when absent.
std::optional<std::vector<std::string>> string_list_attr(hid_t loc, const char* name, const std::string& file) {
  if (H5Aexists(loc, name) <= 0) return std::nullopt;
  Handle attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attr.get()), H5Tclose);
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (!attr.ok() || !type.ok() || !space.ok()) fail(kOp, "'", file, "': cannot read attribute '", name, "'");
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<std::string> out;
  if (n <= 0) return out;  // h5py writes an empty list as an empty float array
  if (H5Tget_class(type.get()) != H5T_STRING)
    fail(kOp, "'", file, "': attribute '", name, "' is not a list of strings");
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> ptrs(std::size_t(n), nullptr);
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    if (H5Aread(attr.get(), mem.get(), ptrs.data()) < 0) fail(kOp, "'", file, "': cannot read attribute '", name, "'");
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      H5free_memory(p);
    }
  } else {
    const std::size_t size = H5Tget_size(type.get());
    std::vector<char> buf(std::size_t(n) * size, '\0');
    if (H5Aread(attr.get(), type.get(), buf.data()) < 0) fail(kOp, "'", file, "': cannot read attribute '", name, "'");
    for (hssize_t i = 0; i < n; ++i) {
      const char* p = buf.data() + std::size_t(i) * size;
      out.emplace_back(p, strnlen(p, size));
    }
  }
  return out;
}

// A floating or integer dataset (Normalization's count is an integer) as an f64 tensor of its
// shape.
Tensor read_dataset(hid_t loc, const std::string& path, const std::string& file) {
  Handle ds(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(kOp, "'", file, "': cannot open dataset '", path, "'");
  Handle type(H5Dget_type(ds.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_FLOAT && H5Tget_class(type.get()) != H5T_INTEGER)
    fail(kOp, "'", file, "': dataset '", path, "' is neither floating point nor integer");
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 8) fail(kOp, "'", file, "': dataset '", path, "' has an unsupported rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Shape shape;
  std::size_t n = 1;
  for (auto d : dims) {
    shape.push_back(std::int64_t(d));
    n *= std::size_t(d);
  }
  std::vector<double> values(n);
  if (n && H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    fail(kOp, "'", file, "': cannot read dataset '", path, "'");
  return constant(values, shape);
}

// Keras' layout of a layer's weights -> soma's: convolution kernels are HWIO in Keras
// ([kh, kw, in, out]; transposed: [kh, kw, out, in]), OIHW in soma ([out, in, kh, kw];
// transposed: [in, out, kh, kw]); everything else has one layout. Layer types not in the table
// are refused.
const std::map<std::string, std::vector<std::int64_t>>& kernel_permutations() {
  static const std::map<std::string, std::vector<std::int64_t>> table = {
      {"Dense", {}},
      {"Conv2D", {3, 2, 0, 1}},
      {"Conv2DTranspose", {3, 2, 0, 1}},
      {"Conv3D", {4, 3, 0, 1, 2}},  // DHWIO -> OIDHW
      {"BatchNormalization", {}},
      {"LayerNormalization", {}},
      {"Embedding", {}},
      // Keras' gate order and layouts, which soma's recurrent layers share (soma/nn/recurrent.hpp):
      // kernel [features, k*units], recurrent_kernel [units, k*units], bias (GRU: [2, 3*units]).
      {"SimpleRNN", {}},
      {"LSTM", {}},
      {"GRU", {}},
      // query, key, value and output kernels and biases, Keras' einsum layouts in both
      {"MultiHeadAttention", {}},
      // mean, variance, count (Keras 3 leaves the count at 0 after adapt: see match_layer)
      {"Normalization", {}},
  };
  return table;
}

// The layer's weights paired with the file's values in soma's layout, every check done (the
// model is changed only when the whole file matches).
using Pending = std::vector<std::pair<Variable, Tensor>>;
void match_layer(nn::Module& layer, const std::vector<Tensor>& keras, const std::string& file,
                 Pending& pending) {
  const std::string who = "layer '" + layer.name() + "' (" + layer.type_name() + ")";
  auto it = kernel_permutations().find(layer.type_name());
  if (it == kernel_permutations().end())
    fail(kOp, "'", file, "': ", who, ": loading Keras weights into this layer type is not supported");
  auto params = layer.named_parameters(false);
  if (params.size() != keras.size())
    fail(kOp, "'", file, "': ", who, " has ", params.size(), " weights, the file has ", keras.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor w = keras[i];
    if (!it->second.empty() && w.rank() == std::int64_t(it->second.size())) w = contiguous(transpose(w, it->second));
    Variable& v = params[i].second;
    // Keras 3's adapt() leaves Normalization's count at 0, its mean and variance are what Keras
    // normalises with: a count of at least 1 marks them as statistics in soma.
    if (layer.type_name() == "Normalization" && params[i].first == "count" && w.numel() == 1 &&
        w.item<double>() < 1)
      w = ones(w.shape(), w.dtype());
    if (w.shape() != v.shape())
      fail(kOp, "'", file, "': ", who, ": weight '", params[i].first, "' is ", shape_str(v.shape()),
           " in soma, the file's (in soma's layout) is ", shape_str(w.shape()));
    pending.emplace_back(v, cast(w, v.dtype()));
  }
}

}  // namespace

void load_keras_weights(Model& model, const std::string& path) {
  QuietErrors quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) fail(kOp, "'", path, "' is not an HDF5 file (or cannot be read)");
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) fail(kOp, "cannot open '", path, "'");

  // Keras 2: a group per layer under the root or /model_weights, listed in layer_names.
  std::optional<Handle> k2;
  if (exists(file.get(), "model_weights")) k2.emplace(H5Gopen2(file.get(), "model_weights", H5P_DEFAULT), H5Gclose);
  else if (H5Aexists(file.get(), "layer_names") > 0) k2.emplace(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose);
  const bool keras3 = !k2 && exists(file.get(), "layers");
  if (!k2 && !keras3)
    fail(kOp, "'", path, "' is neither a Keras 3 .weights.h5 file (no /layers group) nor a Keras 2 "
         ".h5 file (no layer_names)");

  // The file's layers that hold weights, to refuse any the model does not have.
  std::vector<std::string> in_file;
  if (keras3) {
    Handle layers(H5Gopen2(file.get(), "layers", H5P_DEFAULT), H5Gclose);
    for (auto& n : child_names(layers.get()))
      if (exists(layers.get(), n + "/vars/0") || exists(layers.get(), n + "/cell/vars/0") ||
          exists(layers.get(), n + "/query_dense/vars/0"))
        in_file.push_back(n);
  } else {
    for (auto& n : string_list_attr(k2->get(), "layer_names", path).value_or(std::vector<std::string>{})) {
      if (!exists(k2->get(), n)) continue;
      Handle g(H5Gopen2(k2->get(), n.c_str(), H5P_DEFAULT), H5Gclose);
      auto names = string_list_attr(g.get(), "weight_names", path);
      if (names && !names->empty()) in_file.push_back(n);
    }
  }

  std::vector<std::string> used;
  Pending pending;
  // Keras 3 names a layer's group by its class (snake case), numbered per class in the model's
  // order ("dense", "dense_1", ...), not by the layer's name. The weighted types' class names are
  // soma's type names.
  std::map<std::string, int> seen;
  for (auto& [child_name, layer] : model.named_children()) {
    const std::string cls = internal::keras_snake_case(layer->type_name());
    const int k = seen[cls]++;
    if (layer->named_parameters(false).empty()) continue;
    const std::string name = keras3 ? (k ? cls + "_" + std::to_string(k) : cls) : layer->name();
    std::vector<Tensor> values;
    if (keras3) {
      // A recurrent layer keeps its weights in its cell (/layers/<name>/cell/vars), attention
      // in its four projections (query_dense, key_dense, value_dense, output_dense: kernel and
      // bias each, soma's order).
      const std::string at = "layers/" + name;
      std::vector<std::string> groups = {at + "/vars"};
      if (!exists(file.get(), at + "/vars/0")) {
        if (exists(file.get(), at + "/cell/vars/0")) groups = {at + "/cell/vars"};
        else if (exists(file.get(), at + "/query_dense/vars/0"))
          groups = {at + "/query_dense/vars", at + "/key_dense/vars", at + "/value_dense/vars",
                    at + "/output_dense/vars"};
      }
      for (const auto& vars : groups)
        for (int i = 0; exists(file.get(), vars + "/" + std::to_string(i)); ++i)
          values.push_back(read_dataset(file.get(), vars + "/" + std::to_string(i), path));
    } else if (exists(k2->get(), name)) {
      Handle g(H5Gopen2(k2->get(), name.c_str(), H5P_DEFAULT), H5Gclose);
      for (auto& w : string_list_attr(g.get(), "weight_names", path).value_or(std::vector<std::string>{}))
        values.push_back(read_dataset(g.get(), w, path));
    }
    if (values.empty())
      fail(kOp, "'", path, "' has no weights for layer '", layer->name(), "' (", layer->type_name(),
           keras3 ? ", /layers/" + name + "/vars" : std::string(), ")");
    match_layer(*layer, values, path, pending);
    used.push_back(name);
  }
  for (auto& n : in_file)
    if (std::find(used.begin(), used.end(), n) == used.end())
      fail(kOp, "'", path, "' has weights for layer '", n, "', which the model does not have");
  for (auto& [v, w] : pending) v.assign(w);
}

#endif

}  // namespace soma::model
