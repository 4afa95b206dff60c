#include "soma/nn/module.hpp"

#include <mutex>
#include <regex>
#include <set>
#include <unordered_map>

#include "internal/tensor_vector_pool.hpp"
#include "soma/autograd.hpp"
#include "soma/input_limits.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

std::mutex& name_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, int>& name_counters() {
  static std::unordered_map<std::string, int> counters;
  return counters;
}

// Keras' to_snake_case: "Conv2DTranspose" -> "conv2d_transpose", "LeakyReLU" -> "leaky_re_lu".
std::string snake_case(const std::string& name) {
  static const std::regex first("(.)([A-Z][a-z0-9]+)");
  static const std::regex second("([a-z])([A-Z])");
  std::string s = std::regex_replace(name, first, "$1_$2");
  s = std::regex_replace(s, second, "$1_$2");
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string unique_layer_name(const std::string& type_name) {
  std::string base = snake_case(type_name);
  std::lock_guard<std::mutex> lock(name_mutex());
  int n = name_counters()[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

void reset_layer_name_counters() {
  std::lock_guard<std::mutex> lock(name_mutex());
  name_counters().clear();
}

Module::Module() = default;

// A copy is unbuilt (the weights build() makes appear on its first call), takes a fresh
// automatic name unless the source was named explicitly, and keeps what the constructor
// registered: submodules and weights (shared handles, as the Variable and ModuleRef members a
// derived class copies along are), and their regularisers. What build() registered is dropped,
// since the copy's build() registers its own.
Module::Module(const Module& other)
    : name_(other.name_explicit_ ? other.name_ : std::string()),
      name_explicit_(other.name_explicit_),
      training_(other.training_),
      trainable_(other.trainable_),
      device_(other.device_) {
  for (std::size_t i = 0; i < other.children_.size(); ++i)
    if (!other.child_from_build_[i]) {
      children_.push_back(other.children_[i]);
      child_from_build_.push_back(false);
    }
  for (std::size_t i = 0; i < other.params_.size(); ++i)
    if (!other.param_from_build_[i]) {
      params_.push_back(other.params_[i]);
      created_trainable_.push_back(other.created_trainable_[i]);
      param_from_build_.push_back(false);
    }
  for (std::size_t i = 0; i < other.regularizers_.size(); ++i)
    if (!other.regularizer_from_build_[i]) {
      regularizers_.push_back(other.regularizers_[i]);
      regularizer_from_build_.push_back(false);
    }
}

const std::string& Module::name() const {
  // Named on first use (type_name() is virtual, so the constructor cannot ask for it).
  if (name_.empty()) name_ = unique_layer_name(type_name());
  return name_;
}

Module& Module::set_name(std::string name) {
  if (name.empty()) fail(type_name(), "set_name: the name must not be empty");
  name_ = std::move(name);
  name_explicit_ = true;
  return *this;
}

Tensor Module::operator()(const Tensor& x) {
  if (!x.defined()) fail(type_name(), "layer '", name(), "' called on an undefined Tensor");
  // The one-element vectors in and out come from a per-thread pool: no heap allocation per layer.
  std::vector<Tensor> in = soma::detail::take_tensor_vector();
  in.push_back(x);
  std::vector<Tensor> out = call(in);
  soma::detail::give_back_tensor_vector(std::move(in));
  if (out.empty()) fail(type_name(), "layer '", name(), "' returned no outputs");
  Tensor y = std::move(out.front());
  soma::detail::give_back_tensor_vector(std::move(out));
  return y;
}

std::vector<Tensor> Module::call(const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1)
    fail(type_name(), "layer '", name(), "' takes 1 input, got ", inputs.size());
  build_for(inputs[0].shape());
  std::vector<Tensor> out = soma::detail::take_tensor_vector();
  out.push_back(forward(inputs[0]));
  return out;
}

Tensor Module::forward(const Tensor& x) {
  (void)x;
  fail(type_name(), "layer '", name(), "' implements neither forward() nor call()");
}

void Module::build_for(const Shape& input_shape) {
  if (built_) return;
  NoGradScope no_grad;  // initialisers are not part of any gradient
  building_ = true;
  try {
    build(input_shape);
  } catch (...) {
    building_ = false;
    throw;
  }
  building_ = false;
  built_ = true;
}

namespace {
void collect_modes(const Module& m, std::vector<bool>& out) {
  out.push_back(m.training());
  for (const auto& [n, c] : m.named_children()) collect_modes(*c, out);
}
}  // namespace

void Module::restore_modes(const std::vector<bool>& modes, std::size_t& i) {
  training_ = modes[i++];
  for (auto& [n, c] : children_) c->restore_modes(modes, i);
}

Shape Module::output_shape(const Shape& input_shape) {
  Shape probe = input_shape;
  for (auto& d : probe)
    if (d < 0) d = 1;
  if (!input_shape.empty() && input_shape[0] < 0) probe[0] = 1;
  // Eval mode and no tape: probing must not update moving statistics or record anything.
  std::vector<bool> modes;
  collect_modes(*this, modes);
  eval();
  Shape out;
  try {
    NoGradScope no_grad;
    out = (*this)(zeros(probe)).shape();
  } catch (...) {
    std::size_t i = 0;
    restore_modes(modes, i);
    throw;
  }
  std::size_t i = 0;
  restore_modes(modes, i);
  if (!input_shape.empty() && !out.empty()) out[0] = input_shape[0];
  return out;
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Variable>> out = params_;
  if (!recurse) return out;
  for (const auto& [cname, child] : children_)
    for (auto& [pname, v] : child->named_parameters(true)) out.emplace_back(cname + "." + pname, v);
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) const {
  std::vector<Variable> out;
  for (auto& [n, v] : named_parameters(recurse)) out.push_back(v);
  return out;
}

std::vector<Variable> Module::trainable_parameters() const {
  std::vector<Variable> out;
  for (auto& [n, v] : named_parameters(true))
    if (v.trainable()) out.push_back(v);
  return out;
}

std::vector<Variable> Module::non_trainable_parameters() const {
  std::vector<Variable> out;
  for (auto& [n, v] : named_parameters(true))
    if (!v.trainable()) out.push_back(v);
  return out;
}

std::int64_t Module::count_params() const {
  std::int64_t n = 0;
  for (auto& [name, v] : named_parameters(true)) n += soma::numel(v.shape());
  return n;
}

void Module::set_trainable(bool on) {
  trainable_ = on;
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].second.value().impl().trainable = on && created_trainable_[i];
  for (auto& [n, c] : children_) c->set_trainable(on);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  NoGradScope no_grad;
  // Host copies (as Keras' get_weights): files, checkpoints and comparisons read them.
  for (auto& [n, v] : named_parameters(true))
    out.emplace(n, v.value().device().is_cpu() ? copy(v.value()) : v.value().to(Device::cpu()));
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const std::string who = type_name() + ".load_state_dict";
  auto params = named_parameters(true);
  std::set<std::string> known;
  for (auto& [n, v] : params) known.insert(n);
  if (strict) {
    std::vector<std::string> missing, unexpected;
    for (auto& [n, v] : params)
      if (!state.count(n)) missing.push_back(n);
    for (auto& [n, t] : state)
      if (!known.count(n)) unexpected.push_back(n);
    if (!missing.empty() || !unexpected.empty()) {
      std::string msg = "module '" + name() + "':";
      auto list = [](const std::vector<std::string>& v) {
        std::string s;
        for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", '" : "'") + v[i] + "'";
        return s;
      };
      if (!missing.empty()) msg += " missing keys " + list(missing) + ";";
      if (!unexpected.empty()) msg += " unexpected keys " + list(unexpected) + ";";
      if (!built_ && params.empty())
        msg += " the module is not built yet: call it once on an input (or build_for(shape)) "
               "so that its parameters exist";
      else
        msg.pop_back();
      throw Error(who + ": " + msg);
    }
  }
  // Check everything before writing anything, so a bad state leaves the module unchanged.
  for (auto& [n, v] : params) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    const Tensor& t = it->second;
    if (!t.defined()) fail(who, "module '", name(), "': value for '", n, "' is undefined");
    if (t.shape() != v.shape())
      fail(who, "module '", name(), "': shape mismatch for '", n, "': expected ",
           shape_str(v.shape()), ", got ", shape_str(t.shape()));
    if (t.dtype() != v.dtype())
      fail(who, "module '", name(), "': dtype mismatch for '", n, "': expected ", v.dtype(),
           ", got ", t.dtype());
  }
  NoGradScope no_grad;
  for (auto& [n, v] : params) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    const Tensor& t = it->second;
    v.assign(t.device() == v.value().device() ? t : t.to(v.value().device()));
  }
}

namespace {
// Gives a variable the storage of `moved` (its value on another device), keeping the variable:
// tapes, optimisers and the layers' Variable members hold handles to the same TensorImpl, so
// they all see the move.
void adopt_storage(const Variable& v, const Tensor& moved) {
  TensorImpl& impl = v.value().impl();
  impl.storage = moved.storage();
  impl.strides = moved.strides();  // packed by to(): contiguous, offset 0
  impl.offset = moved.offset();
  impl.device = moved.device();
}
void move_variable(const Variable& v, Device device) {
  if (v.value().device() != device) adopt_storage(v, v.value().to(device));
}
}  // namespace

void Module::to(Device device) {
  NoGradScope no_grad;
  // Every copy first, then the switch: a device that cannot take them leaves the module as it
  // was.
  std::vector<std::pair<Variable, Tensor>> moved;
  std::set<const TensorImpl*> seen;  // a shared layer lists its weights once per use
  try {
    for (auto& [n, v] : named_parameters(true))
      if (v.value().device() != device && seen.insert(v.value().impl_ptr().get()).second)
        moved.emplace_back(v, v.value().to(device));
  } catch (const Error& e) {
    fail(type_name() + ".to", "module '", name(), "' cannot move to ", device.str(), ": ",
         e.what());
  }
  for (auto& [v, t] : moved) adopt_storage(v, t);
  set_device(device);
}

void Module::set_device(Device device) {
  device_ = device;
  for (auto& [n, c] : children_) c->set_device(device);
}

std::vector<Tensor> Module::regularization_losses() const {
  std::vector<Tensor> out;
  for (auto& [v, r] : regularizers_)
    if (r.active()) out.push_back(r(v.value()));
  for (auto& [n, c] : children_)
    for (auto& t : c->regularization_losses()) out.push_back(std::move(t));
  return out;
}

void Module::check_new_param_name(const std::string& pname) const {
  if (pname.empty()) fail(type_name(), "layer '", name(), "': a weight needs a name");
  for (auto& [n, v] : params_)
    if (n == pname) fail(type_name(), "layer '", name(), "' already has a weight named '", pname, "'");
  for (auto& [n, c] : children_)
    if (n == pname)
      fail(type_name(), "layer '", name(), "': weight name '", pname, "' clashes with a submodule");
}

Variable Module::push_weight(const std::string& pname, const Tensor& value, bool trainable) {
  Variable v(value, name() + "/" + pname, trainable);
  if (v.value().device() != device_) {  // built after to(device): created there
    NoGradScope no_grad;
    move_variable(v, device_);
  }
  created_trainable_.push_back(v.trainable());
  param_from_build_.push_back(building_);
  if (!trainable_) v.value().impl().trainable = false;  // created inside a frozen module
  params_.emplace_back(pname, v);
  return v;
}

Variable Module::add_weight(const std::string& pname, const Shape& shape, const Initializer& init,
                            Fans fans, bool trainable, DType dtype) {
  check_new_param_name(pname);
  if (!init.fn) fail(type_name(), "layer '", name(), "': weight '", pname, "' has no initializer");
  if (const std::string* source = limits::file_model_source()) {
    // A model described by a file: refuse an absurd weight before allocating it.
    std::int64_t n = 1;
    bool overflow = false;
    for (auto d : shape)
      if (d >= 0) overflow = overflow || __builtin_mul_overflow(n, d, &n);
    if (overflow || n > limits::kMaxElementsFromFile)
      fail(type_name(), "layer '", name(), "' from ", *source, ": weight '", pname, "' of shape ",
           shape_str(shape), " would have ", overflow ? std::string("more than 2^63") : std::to_string(n),
           " elements; the limit for a tensor described by a file is ", limits::kMaxElementsFromFile,
           " (2^31)");
  }
  Tensor value;
  {
    NoGradScope no_grad;
    value = init(shape, dtype, fans);
  }
  if (value.shape() != shape)
    fail(type_name(), "layer '", name(), "': initializer '", init.name, "' gave shape ",
         shape_str(value.shape()), " for weight '", pname, "' of shape ", shape_str(shape));
  if (value.dtype() != dtype) value = value.cast(dtype);
  return push_weight(pname, value, trainable);
}

Variable Module::add_weight(const std::string& pname, const Tensor& value, bool trainable) {
  check_new_param_name(pname);
  if (!value.defined())
    fail(type_name(), "layer '", name(), "': weight '", pname, "' given an undefined Tensor");
  return push_weight(pname, value, trainable);
}

void Module::add_regularizer(const Variable& v, const Regularizer& r) {
  if (!r.active()) return;
  regularizers_.emplace_back(v, r);
  regularizer_from_build_.push_back(building_);
}

ModuleRef Module::register_module(const std::string& cname, ModuleRef m) {
  if (!m) fail(type_name(), "layer '", name(), "': register_module('", cname, "') got a null module");
  std::string n = cname.empty() ? m->name() : cname;
  for (auto& [c, ref] : children_)
    if (c == n) fail(type_name(), "layer '", name(), "' already has a submodule named '", n, "'");
  for (auto& [p, v] : params_)
    if (p == n) fail(type_name(), "layer '", name(), "': submodule name '", n, "' clashes with a weight");
  if (!device_.is_cpu() && m->device_ != device_) m->to(device_);  // follows its parent
  children_.emplace_back(n, m);
  child_from_build_.push_back(building_);
  return m;
}

}  // namespace soma::nn
