// check_weights: NaN / inf weights and negative batch-norm variances.
#include "soma/model/weight_checks.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "soma/autograd.hpp"
#include "soma/error.hpp"
#include "soma/nn/module.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

void check_module(const nn::Module& m, const std::string& layer, const std::string& key_prefix,
                  std::vector<WeightProblem>& out) {
  const std::vector<std::string> nonnegative = m.nonnegative_weights();
  for (auto& [name, var] : m.named_parameters(false)) {
    const Tensor& v = var.value();
    if (!v.defined() || !is_floating(v.dtype())) continue;
    std::vector<double> host;
    {
      NoGradScope no_grad;
      host = (v.device().is_cpu() ? v : v.to(Device::cpu())).contiguous().to_vector<double>();
    }
    WeightProblem p;
    p.layer = layer;
    p.variable = name;
    p.key = key_prefix + name;
    p.size = std::int64_t(host.size());
    const bool variance = std::find(nonnegative.begin(), nonnegative.end(), name) != nonnegative.end();
    for (double x : host) {
      if (std::isnan(x)) ++p.nan_count;
      else if (std::isinf(x)) ++p.inf_count;
      else if (variance && x < 0) ++p.negative_count;
    }
    if (p.nan_count == 0 && p.inf_count == 0 && p.negative_count == 0) continue;
    std::ostringstream os;
    os << "layer '" << (layer.empty() ? "(model)" : layer) << "', variable '" << name << "': ";
    const char* sep = "";
    if (p.nan_count) os << sep << p.nan_count << " NaN", sep = ", ";
    if (p.inf_count) os << sep << p.inf_count << " inf", sep = ", ";
    if (p.negative_count) os << sep << p.negative_count << " negative (a variance must be >= 0)";
    os << " of " << p.size << " values";
    p.message = os.str();
    out.push_back(std::move(p));
  }
  for (auto& [key, child] : m.named_children()) {
    if (!child) continue;
    const std::string child_layer = layer.empty() ? child->name() : layer + "/" + child->name();
    check_module(*child, child_layer, key_prefix + key + ".", out);
  }
}

}  // namespace

std::vector<WeightProblem> check_weights(const nn::Module& model) {
  std::vector<WeightProblem> out;
  check_module(model, "", "", out);
  return out;
}

void require_valid_weights(const nn::Module& model, const std::string& who) {
  auto problems = check_weights(model);
  if (problems.empty()) return;
  std::ostringstream os;
  os << "model '" << model.name() << "' has invalid weights: ";
  for (std::size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i].message;
  fail(who, os.str());
}

}  // namespace soma
