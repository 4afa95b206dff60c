#include "soma/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "soma/autocast.hpp"
#include "soma/autograd.hpp"
#include "soma/data/dataset.hpp"
#include "soma/dist/data_parallel.hpp"
#include "soma/dist/dist.hpp"
#include "soma/graph/function.hpp"
#include "soma/metrics.hpp"
#include "soma/model/output_activation.hpp"
#include "soma/model/progress.hpp"
#include "soma/model/tensorboard.hpp"
#include "internal/tensor_vector_pool.hpp"
#include "core/device_backend.hpp"
#include "model/batch_stager.hpp"
#include "ops/autocast_cache.hpp"
#include "model/step_graph.hpp"
#include "model/summary_table.hpp"
#include "nn/accumulators.hpp"
#include "nn/host_twins.hpp"
#include "internal/copy.hpp"
#include "model/topo_order.hpp"
#include "soma/model/weights.hpp"
#include "soma/ops.hpp"
#include "soma/optim/loss_scale.hpp"
#include "soma/optim/optimizers.hpp"
#include "soma/nn/losses.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

// ---- the functional graph -------------------------------------------------------------------
struct Model::Graph {
  std::vector<std::shared_ptr<detail::SymbolicNode>> nodes;  // topological order, inputs first
  std::vector<ModuleRef> layers;                             // distinct, first use first
};

Model::Model(const SymbolicTensor& input, const SymbolicTensor& output)
    : Model(std::vector<SymbolicTensor>{input}, std::vector<SymbolicTensor>{output}) {}

Model::Model(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  const char* who = "Model";
  if (inputs_.empty()) fail(who, "a functional model needs at least one input");
  if (outputs_.empty()) fail(who, "a functional model needs at least one output");
  std::unordered_set<const detail::SymbolicNode*> input_nodes;
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputs_[i].defined()) fail(who, "input ", i, " is an unset SymbolicTensor");
    if (!inputs_[i].is_input())
      fail(who, "input ", i, " ('", inputs_[i].name(),
           "') is a layer's output; inputs must come from nn::Input()");
    if (!input_nodes.insert(inputs_[i].node().get()).second)
      fail(who, "input '", inputs_[i].name(), "' is listed twice");
  }
  auto g = std::make_shared<Graph>();
  std::unordered_set<const detail::SymbolicNode*> seen;
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    if (!outputs_[i].defined()) fail(who, "output ", i, " is an unset SymbolicTensor");
    detail::topo_visit(outputs_[i].node(), seen, g->nodes);
  }
  std::unordered_set<const Module*> layer_seen;
  for (auto& n : g->nodes) {
    if (!n->layer) {
      if (!input_nodes.count(n.get()))
        fail(who, "the outputs depend on input '", n->name,
             "', which is not among the model's inputs");
      continue;
    }
    if (layer_seen.insert(n->layer.get()).second) g->layers.push_back(n->layer);
  }
  // Children by position: state_dict keys do not depend on process-wide name counters.
  for (std::size_t i = 0; i < g->layers.size(); ++i) register_module(std::to_string(i), g->layers[i]);
  graph_ = std::move(g);
  build_for(inputs_[0].shape());  // the layers were built while the graph was recorded
}

std::vector<Tensor> Model::call(const std::vector<Tensor>& xs) {
  if (!graph_) return Module::call(xs);
  const std::string who = "Functional";
  if (xs.size() != inputs_.size())
    fail(who, "model '", name(), "' takes ", inputs_.size(), " input(s), got ", xs.size());
  std::unordered_map<const detail::SymbolicNode*, std::vector<Tensor>> values;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Shape& want = inputs_[i].shape();
    const Tensor& x = xs[i];
    if (!x.defined()) fail(who, "model '", name(), "': input ", i, " is undefined");
    bool ok = x.rank() == std::int64_t(want.size());
    for (std::size_t d = 0; ok && d < want.size(); ++d)
      if (want[d] >= 0 && want[d] != x.shape()[d]) ok = false;
    if (!ok)
      fail(who, "model '", name(), "': input ", i, " ('", inputs_[i].name(), "') expects shape ",
           format_shape(want), ", got ", shape_str(x.shape()));
    values[inputs_[i].node().get()] = {x};
  }
  for (auto& n : graph_->nodes) {
    if (!n->layer) continue;
    std::vector<Tensor> ins;
    for (auto& s : n->inputs) ins.push_back(values.at(s.node().get()).at(std::size_t(s.index())));
    values[n.get()] = n->layer->call(ins);
  }
  std::vector<Tensor> out;
  for (auto& o : outputs_) out.push_back(values.at(o.node().get()).at(std::size_t(o.index())));
  return out;
}

Tensor Model::forward(const Tensor& x) {
  if (graph_) return call({x}).at(0);
  return Module::forward(x);
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& x) { return call(x); }

// ---- compile --------------------------------------------------------------------------------
struct Model::Compiled {
  std::vector<LossRef> losses;
  std::vector<double> loss_weights;
  std::vector<std::vector<metrics::MetricRef>> metrics;  // per output (may be fewer lists)
  // Trackers: batch-size-weighted means of the losses. On a device the sums stay there (f64,
  // 0-d) until logs are collected: reading them waits for the step.
  double loss_sum = 0.0, count = 0.0;
  std::vector<double> output_loss_sum;
  Tensor device_loss_sum;
  std::vector<Tensor> device_output_loss_sum;
  // Reads the device sums into the host ones.
  void fold();
  std::size_t n_outputs = 0;  // known after the first step
  std::vector<std::string> output_names;
  std::vector<std::vector<std::string>> metric_names;

  // Fixes the number of outputs and the log names on the first step.
  void settle(std::size_t n_outputs, const std::vector<SymbolicTensor>& outs);
  // Each output's loss (unweighted) and the weighted total.
  Tensor loss(const std::vector<Tensor>& y, const std::vector<Tensor>& pred, const Tensor& sw,
              std::vector<Tensor>& per_output) const;
  // Adds one batch to the trackers and metrics (no tape).
  void track(double batch_size, const Tensor& total, const std::vector<Tensor>& per_output,
             const std::vector<Tensor>& y, const std::vector<Tensor>& pred);

  // Set while a distributed fit() runs (FitOptions::distributed).
  struct Distributed {
    dist::CommunicatorRef comm;
    std::int64_t bucket_bytes = 0;
    std::unique_ptr<dist::GradientReducer> reducer;
    std::vector<std::uint64_t> reducer_vars;  // ids of the variables the reducer was built for
    bool weights_synced = false;
    double weight = 1.0;     // this rank's share of the current global batch
    std::uint64_t seed = 0;  // the shuffling seed, the same on every rank
  };
  std::shared_ptr<Distributed> dist;
  // compile(..., {.jit = true}): the traced training step (see train_step).
  bool jit = false;
  // compile(..., {.mixed_precision = "bf16"}): the autocast dtype of every step. Unset: the
  // steps leave the caller's autocast scope (if any) in charge.
  std::optional<DType> precision;
  // The optimiser when it is a LossScaleOptimizer (f16 wraps one): the eager step
  // differentiates the scaled loss. Null otherwise: the f32 path is unchanged.
  optim::LossScaleOptimizer* loss_scale = nullptr;
  std::shared_ptr<Function> traced;
};

namespace {
// compile's mixed_precision for one step, when it was given.
struct StepPrecision {
  std::optional<AutocastScope> scope;
  explicit StepPrecision(std::optional<DType> dtype) {
    if (dtype) scope.emplace(*dtype);
  }
};
}  // namespace

namespace {
// compile()'s Keras names go through the same factories as model loading
// (optim::optimizer_from_name, nn::loss_for_model, metrics::metric_from_name); errors say which
// argument held the name.
template <class F>
auto resolve_named(const char* what, const std::string& n, F make) {
  try {
    return make(n);
  } catch (const Error& e) {
    fail("compile", "the ", what, " name: ", e.what());
  }
}
}  // namespace

void Model::compile(OptimizerArg optimizer, LossArg loss, MetricArgs metrics,
                    CompileOptions options) {
  optim::OptimizerRef opt =
      optimizer.is_name()
          ? resolve_named("optimizer", optimizer.name(),
                          [](const std::string& n) { return optim::optimizer_from_name(n); })
          : optimizer.ref();
  // A cross-entropy named here takes from_logits from the model's last activation (softmax or
  // sigmoid: probabilities), the rule soma train follows (model/output_activation.hpp).
  LossRef l = loss.is_name() ? resolve_named("loss", loss.name(),
                                             [this](const std::string& n) {
                                               return nn::loss_for_model(n, *this);
                                             })
                             : loss.ref();
  std::vector<metrics::MetricRef> ms;
  for (const auto& m : metrics.list())
    ms.push_back(m.is_name() ? resolve_named("metric", m.name(),
                                             [&l](const std::string& n) {
                                               return metrics::metric_from_name(n, l.get());
                                             })
                             : m.ref());
  std::vector<std::vector<metrics::MetricRef>> per_output;
  if (!ms.empty()) per_output.push_back(std::move(ms));
  compile(std::move(opt), std::vector<LossRef>{std::move(l)}, std::move(per_output),
          std::move(options));
}

void Model::compile(optim::OptimizerRef optimizer, std::vector<LossRef> losses,
                    std::vector<std::vector<metrics::MetricRef>> metrics,
                    CompileOptions options) {
  const char* who = "compile";
  if (!optimizer) fail(who, "the optimizer is null");
  if (losses.empty()) fail(who, "a loss is required");
  for (std::size_t i = 0; i < losses.size(); ++i)
    if (!losses[i]) fail(who, "loss ", i, " is null");
  for (auto& list : metrics)
    for (auto& m : list)
      if (!m) fail(who, "a metric is null");
  if (!options.loss_weights.empty() && options.loss_weights.size() != losses.size() &&
      losses.size() != 1)
    fail(who, "loss_weights has ", options.loss_weights.size(), " entries for ", losses.size(),
         " losses");
  if (graph_ && losses.size() != 1 && losses.size() != outputs_.size())
    fail(who, "the model has ", outputs_.size(), " outputs but ", losses.size(),
         " losses were given (give one, or one per output)");
  // "accuracy" means the variant that fits the loss (sparse categorical for a sparse loss, ...).
  for (std::size_t i = 0; i < metrics.size(); ++i)
    for (auto& m : metrics[i])
      m->resolve_for_loss(*losses[losses.size() == 1 ? 0 : std::min(i, losses.size() - 1)]);
  auto c = std::make_shared<Compiled>();
  c->losses = std::move(losses);
  c->loss_weights = std::move(options.loss_weights);
  c->jit = options.jit;
  if (!options.mixed_precision.empty())
    c->precision = parse_autocast_dtype(options.mixed_precision, "compile");
  // f16 (not bf16, whose range is f32's): dynamic loss scaling, as Keras' mixed_float16.
  if (c->precision == DType::f16 && !optimizer->loss_scaler())
    optimizer = optim::LossScaleOptimizer(std::move(optimizer));
  c->loss_scale = optimizer->loss_scaler();
  // The traced step differentiates the unscaled loss: with loss scaling, steps run eagerly.
  if (c->loss_scale) c->jit = false;
  c->metrics = std::move(metrics);
  compiled_ = std::move(c);
  optimizer_ = std::move(optimizer);
}

optim::Optimizer& Model::optimizer() const {
  if (!optimizer_) fail("Model", "model '", name(), "' has no optimizer: call compile() first");
  return *optimizer_;
}

void Model::check_compiled(const char* what) const {
  if (!compiled())
    fail(what, "the model is not compiled; call compile(optimizer, loss) first");
}

namespace {
std::size_t batch_of(const std::vector<Tensor>& ts) {
  return ts.empty() || ts[0].rank() == 0 ? 0 : std::size_t(ts[0].shape()[0]);
}
}  // namespace

// Fixes the number of outputs and the log names on the first step.
void Model::Compiled::settle(std::size_t n_outputs, const std::vector<SymbolicTensor>& outs) {
  Compiled& c = *this;
  if (c.n_outputs == n_outputs) return;
  if (c.losses.size() != 1 && c.losses.size() != n_outputs)
    fail("fit", "the model gives ", n_outputs, " outputs but ", c.losses.size(),
         " losses were compiled");
  if (c.metrics.size() > 1 && c.metrics.size() != n_outputs)
    fail("fit", "the model gives ", n_outputs, " outputs but metrics were compiled for ",
         c.metrics.size());
  if (c.metrics.size() == 1 && n_outputs > 1)
    fail("fit", "the model gives ", n_outputs,
         " outputs: compile metrics per output (one list each)");
  c.n_outputs = n_outputs;
  c.output_names.clear();
  std::set<std::string> used;
  for (std::size_t i = 0; i < n_outputs; ++i) {
    std::string n = i < outs.size() ? outs[i].name() : "output_" + std::to_string(i + 1);
    while (used.count(n)) n = soma::detail::cat(n, "_", i);
    used.insert(n);
    c.output_names.push_back(n);
  }
  c.metric_names.assign(n_outputs, {});
  std::set<std::string> taken = {"loss"};
  for (std::size_t i = 0; i < c.metrics.size(); ++i)
    for (auto& metric : c.metrics[i]) {
      std::string base = metric->name();
      if (n_outputs > 1) base = c.output_names[i] + "_" + base;
      std::string n = base;
      for (int k = 1; taken.count(n); ++k) n = base + "_" + std::to_string(k);
      taken.insert(n);
      c.metric_names[i].push_back(n);
    }
  c.output_loss_sum.assign(n_outputs, 0.0);
}

void Model::Compiled::fold() {
  auto read = [](Tensor& t) {  // zeroed in place under FitOptions::cuda_graph, else dropped
    double v = 0.0;
    for (double x : soma::detail::take_device_sum(t)) v += x;
    return v;
  };
  if (device_loss_sum.defined()) loss_sum += read(device_loss_sum);
  for (std::size_t i = 0; i < device_output_loss_sum.size() && i < output_loss_sum.size(); ++i)
    if (device_output_loss_sum[i].defined()) output_loss_sum[i] += read(device_output_loss_sum[i]);
}

void Model::reset_metrics() {
  if (!compiled_) return;
  if (soma::detail::persistent_accumulators()) {  // zeroed where a captured step adds
    if (compiled_->device_loss_sum.defined()) soma::detail::fill_value(compiled_->device_loss_sum, 0.0);
    for (auto& t : compiled_->device_output_loss_sum)
      if (t.defined()) soma::detail::fill_value(t, 0.0);
  } else {
    compiled_->device_loss_sum = Tensor();
    compiled_->device_output_loss_sum.clear();
  }
  compiled_->loss_sum = compiled_->count = 0.0;
  std::fill(compiled_->output_loss_sum.begin(), compiled_->output_loss_sum.end(), 0.0);
  for (auto& list : compiled_->metrics)
    for (auto& m : list) m->reset_state();
}

Logs Model::collect_logs(bool across_ranks) const {
  Logs logs;
  compiled_->fold();
  const auto& c = *compiled_;
  if (c.count > 0 || c.dist) {  // distributed: every rank must send the same keys
    logs["loss"] = c.count > 0 ? c.loss_sum / c.count : 0.0;
    if (c.n_outputs > 1)
      for (std::size_t i = 0; i < c.n_outputs; ++i)
        logs[c.output_names[i] + "_loss"] = c.output_loss_sum[i] / c.count;
  }
  for (std::size_t i = 0; i < c.metrics.size() && i < c.metric_names.size(); ++i)
    for (std::size_t k = 0; k < c.metrics[i].size(); ++k)
      logs[c.metric_names[i][k]] = c.metrics[i][k]->result();
  // Each rank's logs weigh by its number of samples: the mean over all ranks' samples.
  if (across_ranks && c.dist) logs = dist::average_over_ranks(*c.dist->comm, logs, c.count);
  return logs;
}

std::vector<std::string> Model::metrics_names() const {
  std::vector<std::string> out = {"loss"};
  if (!compiled_) return out;
  const auto& c = *compiled_;
  if (c.n_outputs > 1)
    for (auto& n : c.output_names) out.push_back(n + "_loss");
  for (auto& list : c.metric_names)
    for (auto& n : list) out.push_back(n);
  return out;
}

Tensor Model::Compiled::loss(const std::vector<Tensor>& y, const std::vector<Tensor>& pred,
                             const Tensor& sw, std::vector<Tensor>& per_output) const {
  if (y.size() != pred.size())
    fail("fit", "the model gives ", pred.size(), " outputs but ", y.size(),
         " targets were given");
  per_output.clear();
  Tensor total;
  for (std::size_t i = 0; i < pred.size(); ++i) {
    const Loss& l = *losses[losses.size() == 1 ? 0 : i];
    Tensor li = l(y[i], pred[i], sw);
    per_output.push_back(li);
    double w = loss_weights.empty() ? 1.0 : loss_weights[loss_weights.size() == 1 ? 0 : i];
    Tensor part = w == 1.0 ? li : li * w;
    total = total.defined() ? total + part : part;
  }
  return total;
}

void Model::Compiled::track(double bs, const Tensor& total, const std::vector<Tensor>& per_output,
                            const std::vector<Tensor>& y, const std::vector<Tensor>& pred) {
  NoGradScope no_grad;
  count += bs;
  if (!total.device().is_cpu()) {  // summed on the device: no read per step
    auto add = [bs](Tensor& sum, const Tensor& v) {
      Tensor part = cast(v, DType::f64) * bs;
      if (soma::detail::persistent_accumulators()) soma::detail::add_in_place(sum, part);
      else sum = sum.defined() ? sum + part : part;
    };
    add(device_loss_sum, total);
    if (n_outputs > 1) {
      device_output_loss_sum.resize(n_outputs);
      for (std::size_t i = 0; i < per_output.size(); ++i)
        add(device_output_loss_sum[i], per_output[i]);
    }
  } else {
    loss_sum += total.item<double>() * bs;
    if (n_outputs > 1)
      for (std::size_t i = 0; i < per_output.size(); ++i)
        output_loss_sum[i] += per_output[i].item<double>() * bs;
  }
  for (std::size_t i = 0; i < metrics.size(); ++i)
    for (auto& m : metrics[i]) m->update_state(y[i], pred[i]);
}

void Model::check_trainable(const std::vector<Variable>& vars, const char* who) const {
  if (!vars.empty()) return;
  const std::size_t weights = parameters(true).size();
  if (weights == 0)
    fail(who, "model '", name(), "' has no trainable variables: none of its layers has weights, "
         "so training would change nothing (a custom layer creates its weights with "
         "add_weight(), in its constructor or in build())");
  fail(who, "model '", name(), "' has no trainable variables: its ", weights,
       " weights are all frozen, so training would change nothing; call set_trainable(true) on "
       "the model or on the layers to train");
}

namespace {
// A batch on the model's device. Batches are cut on the host (only their bytes move) and copied
// here; the host copies stay known while the step runs (nn/host_twins.hpp), so that a sparse
// loss checks its labels without reading the device.
// A batch already there (the CPU path) is used as it is: no copy of the vectors per step.
class DeviceBatch {
 public:
  DeviceBatch(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const Tensor& sw,
              Device device)
      : x_(&x), y_(&y), sw_(&sw) {
    auto elsewhere = [device](const Tensor& t) { return t.defined() && t.device() != device; };
    bool move = elsewhere(sw);
    for (const auto& t : x) move = move || elsewhere(t);
    for (const auto& t : y) move = move || elsewhere(t);
    if (!move) return;
    auto moved = [&](const Tensor& t) { return elsewhere(t) ? t.to(device) : t; };
    for (const auto& t : x) mx_.push_back(moved(t));
    for (const auto& t : y) my_.push_back(moved(t));
    msw_ = moved(sw);
    x_ = &mx_;
    y_ = &my_;
    sw_ = &msw_;
    twins_.emplace(my_, y);
  }
  const std::vector<Tensor>& x() const { return *x_; }
  const std::vector<Tensor>& y() const { return *y_; }
  const Tensor& sw() const { return *sw_; }

 private:
  const std::vector<Tensor>* x_;
  const std::vector<Tensor>* y_;
  const Tensor* sw_;
  std::vector<Tensor> mx_, my_;
  Tensor msw_;
  std::optional<soma::detail::HostTwinScope> twins_;
};
}  // namespace

Logs Model::train_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y_in,
                       const Tensor& sw_in, const char* who) {
  DeviceBatch batch(x_in, y_in, sw_in, device());
  const std::vector<Tensor>& x = batch.x();
  const std::vector<Tensor>& y = batch.y();
  const Tensor& sw = batch.sw();
  auto& c = *compiled_;
  if (c.dist && !c.dist->weights_synced) sync_distributed_weights(x);
  // The whole step: the optimiser has no matrix work, so including it changes nothing.
  StepPrecision autocast(c.precision);
  // jit: once a first eager step has built the layers, forward pass, loss and gradients run as
  // a graph traced per batch shape; the optimiser and the trackers run eagerly as below.
  if (c.jit && !c.dist && c.n_outputs > 0) {
    std::vector<Variable> vars = trainable_parameters();
    check_trainable(vars, who);
    const std::size_t nx = x.size(), ny = y.size(), nv = vars.size(), no = c.n_outputs;
    if (!c.traced)
      c.traced = std::make_shared<Function>(function([this, &c, vars, nx, ny](const std::vector<Tensor>& in) {
        std::vector<Tensor> xs(in.begin(), in.begin() + std::ptrdiff_t(nx));
        std::vector<Tensor> ys(in.begin() + std::ptrdiff_t(nx), in.begin() + std::ptrdiff_t(nx + ny));
        Tensor w = in.size() > nx + ny ? in.back() : Tensor();
        GradientTape tape;
        std::vector<Tensor> p = call(xs), per;
        Tensor t = c.loss(ys, p, w, per);
        for (auto& r : regularization_losses()) t = t + r.cast(t.dtype());
        std::vector<Tensor> out{t};
        if (per.size() != p.size()) per.assign(p.size(), Tensor());
        out.insert(out.end(), per.begin(), per.end());
        out.insert(out.end(), p.begin(), p.end());
        for (auto& g : tape.gradient(t, vars)) out.push_back(g);
        return out;
      }));
    std::vector<Tensor> in = x;
    in.insert(in.end(), y.begin(), y.end());
    if (sw.defined()) in.push_back(sw);
    std::vector<Tensor> out = (*c.traced)(in);
    std::vector<Tensor> per(out.begin() + 1, out.begin() + 1 + std::ptrdiff_t(no));
    std::vector<Tensor> pred(out.begin() + 1 + std::ptrdiff_t(no), out.begin() + 1 + std::ptrdiff_t(2 * no));
    std::vector<Variable> used_vars;
    std::vector<Tensor> used_grads;
    for (std::size_t i = 0; i < nv; ++i)
      if (out[1 + 2 * no + i].defined()) {
        used_vars.push_back(vars[i]);
        used_grads.push_back(out[1 + 2 * no + i]);
      }
    if (!used_vars.empty()) optimizer_->apply_gradients(used_grads, used_vars);
    c.track(double(batch_of(x)), out[0], per, y, pred);
    return {};
  }
  GradientTape tape;
  std::vector<Tensor> pred = call(x);
  c.settle(pred.size(), outputs_);
  std::vector<Tensor> per_output;
  Tensor total = c.loss(y, pred, sw, per_output);
  for (auto& r : regularization_losses()) total = total + r.cast(total.dtype());
  std::vector<Variable> vars = trainable_parameters();
  check_trainable(vars, who);
  dist::GradientReducer* reducer = c.dist ? distributed_reducer(vars) : nullptr;
  if (reducer) {  // all-reduce buckets of gradients as the backward pass finishes them
    reducer->begin_step(c.dist->weight);
    tape.set_gradient_ready_hook(reducer->hook());
  }
  std::vector<Tensor> grads =
      tape.gradient(c.loss_scale ? c.loss_scale->scale_loss(total) : total, vars);
  if (reducer) grads = reducer->finish_step();
  std::vector<Variable> used_vars;
  std::vector<Tensor> used_grads;
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (grads[i].defined()) {
      used_vars.push_back(vars[i]);
      used_grads.push_back(grads[i]);
    }
  if (!vars.empty() && used_vars.empty())
    fail(who, "no trainable weight of model '", name(),
         "' receives a gradient from the loss; check that the outputs depend on the weights");
  if (!used_vars.empty()) optimizer_->apply_gradients(used_grads, used_vars);
  c.track(double(batch_of(x)), total, per_output, y, pred);
  return {};
}

void Model::test_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y_in,
                      const Tensor& sw_in) {
  DeviceBatch batch(x_in, y_in, sw_in, device());
  const std::vector<Tensor>& x = batch.x();
  const std::vector<Tensor>& y = batch.y();
  const Tensor& sw = batch.sw();
  auto& c = *compiled_;
  NoGradScope no_grad;
  StepPrecision autocast(c.precision);
  std::vector<Tensor> pred = call(x);
  c.settle(pred.size(), outputs_);
  std::vector<Tensor> per_output;
  Tensor total = c.loss(y, pred, sw, per_output);
  for (auto& r : regularization_losses()) total = total + r.cast(total.dtype());
  c.track(double(batch_of(x)), total, per_output, y, pred);
}

// ---- data helpers ---------------------------------------------------------------------------
namespace {
std::int64_t check_xy(const char* who, const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                      bool need_y) {
  if (x.empty()) fail(who, "no inputs given");
  if (need_y && y.empty()) fail(who, "no targets given");
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!x[i].defined()) fail(who, "input ", i, " is undefined");
    if (x[i].rank() == 0) fail(who, "input ", i, " is a scalar; axis 0 must be the batch");
  }
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!y[i].defined()) fail(who, "target ", i, " is undefined");
    if (y[i].rank() == 0) fail(who, "target ", i, " is a scalar; axis 0 must be the batch");
  }
  const std::int64_t n = x[0].shape()[0];
  for (std::size_t i = 1; i < x.size(); ++i)
    if (x[i].shape()[0] != n)
      fail(who, "inputs have different numbers of samples: x[0] has shape ",
           shape_str(x[0].shape()), ", x[", i, "] has shape ", shape_str(x[i].shape()));
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i].shape()[0] != n)
      fail(who, "x and y have different numbers of samples: x has shape ", shape_str(x[0].shape()),
           " and y", y.size() > 1 ? soma::detail::cat("[", i, "]") : std::string(),
           " has shape ", shape_str(y[i].shape()), " (axis 0 is the batch)");
  return n;
}

// Refuses data without samples: `what` is "no training data", "no data", ...
void check_not_empty(const char* who, const char* what, const std::vector<Tensor>& x,
                     std::int64_t n) {
  if (n == 0)
    fail(who, what, ": x has 0 samples (shape ", shape_str(x[0].shape()), ")");
}

// The batch size used for n samples: at most n (so that start + batch_size cannot overflow; a
// batch size beyond the data is one batch of everything, as in Keras), and the number of
// batches, computed without overflow.
std::int64_t effective_batch(std::int64_t batch_size, std::int64_t n) {
  return std::max<std::int64_t>(1, std::min(batch_size, n));
}
std::int64_t batch_count(std::int64_t n, std::int64_t batch_size) {
  return n <= 0 ? 0 : 1 + (n - 1) / batch_size;
}

std::vector<Tensor> rows(const std::vector<Tensor>& ts, std::int64_t start, std::int64_t stop) {
  std::vector<Tensor> out;
  for (auto& t : ts) out.push_back(t.slice(0, start, stop));
  return out;
}

std::vector<Tensor> gather_rows(const std::vector<Tensor>& ts, const Tensor& idx) {
  std::vector<Tensor> out;
  for (auto& t : ts)
    out.push_back(gather(t, idx.device() == t.device() ? idx : idx.to(t.device()), 0));
  return out;
}

// The per-sample weights from class_weight and sample_weight, or undefined when neither is set.
Tensor sample_weights(const std::map<std::int64_t, double>& class_weight, const Tensor& sw,
                      const std::vector<Tensor>& y, std::int64_t n) {
  Tensor out;
  if (!class_weight.empty()) {
    if (y.size() != 1) fail("fit", "class_weight needs a model with a single output");
    const Tensor& t = y[0];
    Tensor ids;
    if (t.rank() >= 2 && t.shape().back() > 1) ids = argmax(t, -1);  // one-hot / probabilities
    else ids = t.reshape({n});
    std::vector<double> v = ids.to_vector<double>();
    std::vector<float> w(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto it = class_weight.find(std::int64_t(std::llround(v[i])));
      w[i] = float(it == class_weight.end() ? 1.0 : it->second);  // unlisted classes weigh 1
    }
    out = constant(w, {n});
  }
  if (sw.defined()) {
    if (sw.rank() != 1 || sw.shape()[0] != n)
      fail("fit", "sample_weight must have shape [", n, "] (one weight per sample), got ",
           shape_str(sw.shape()));
    Tensor s = sw.cast(DType::f32);
    out = out.defined() ? out * s : s;
  }
  return out;
}

struct ModeGuard {
  Module& m;
  bool was;
  ModeGuard(Module& mod, bool training) : m(mod), was(mod.training()) { m.train(training); }
  ~ModeGuard() { m.train(was); }
};

std::ostream& out_stream(std::ostream* os) { return os ? *os : std::cout; }

// Distributed fit: ranks other than 0 leave out the callbacks that write files.
std::vector<callbacks::CallbackRef> callbacks_for_rank(
    const std::vector<callbacks::CallbackRef>& cbs, bool distributed) {
  if (!distributed || dist::is_main()) return cbs;
  std::vector<callbacks::CallbackRef> out;
  for (auto& cb : cbs) {
    if (!cb->writes_files()) out.push_back(cb);
  }
  return out;
}

// Distributed fit: the ranks must cut the same global batches out of the same data, or they
// would train on a mix without noticing. Compares a checksum of the first global batch (every
// rank gets the same verdict, so all throw together).
void check_same_batch(const std::vector<Tensor>& global_x) {
  double sum = 0.0;
  // Device data (a model on a GPU) is summed there; only the sum comes to the host.
  for (const Tensor& t : global_x)
    sum += soma::sum(t.cast(DType::f64)).to(Device::cpu()).item<double>();
  Tensor v = Tensor::empty({2}, DType::f64);
  v.data<double>()[0] = sum;
  v.data<double>()[1] = -sum;
  dist::world().allreduce(v, dist::ReduceOp::Max);
  const double hi = v.data<double>()[0], lo = -v.data<double>()[1];
  if (hi > lo && hi - lo > 1e-9 * std::max(1.0, std::fabs(hi)))
    fail("fit", "the ranks see different first batches (input checksums from ", lo, " to ", hi,
         "): every rank must load the same data and shuffle it with the same seed (give "
         "shuffle() a seed, or call set_seed with the same value on every rank)");
}

// Ends the distributed part of fit() also when it throws.
template <class F>
struct ScopeExit {
  F f;
  ~ScopeExit() { f(); }
};
template <class F>
ScopeExit(F) -> ScopeExit<F>;
bool terminal_flag(std::ostream* os, std::optional<bool> flag) {
  if (flag) return *flag;
  return os == nullptr && callbacks::stdout_is_terminal();
}
}  // namespace

// ---- distributed fit ----------------------------------------------------------------------
void Model::begin_distributed(const FitOptions& o) {
  if (o.distributed_bucket_bytes < 0)
    fail("fit", "distributed_bucket_bytes must be >= 0, got ", o.distributed_bucket_bytes);
  dist::init();  // no-op when the program called it
  auto d = std::make_shared<Compiled::Distributed>();
  d->comm = dist::world_ref();
  d->bucket_bytes = o.distributed_bucket_bytes;
  // Every rank must draw the same batches: rank 0's seed decides.
  Tensor seed = Tensor::empty({1}, DType::i64);
  seed.data<std::int64_t>()[0] =
      o.seed ? std::int64_t(*o.seed)
             : std::int64_t(random_uniform({1}, 0.0, 1e15, DType::f64).item<double>());
  d->comm->broadcast(seed, 0);
  d->seed = std::uint64_t(seed.data<std::int64_t>()[0]);
  compiled_->dist = std::move(d);
}

void Model::end_distributed() {
  if (compiled_) compiled_->dist.reset();
}

// Rank 0's weights (and non-trainable state) go to every rank before the first step; lazily built
// layers get their weights from a first call on one sample.
void Model::sync_distributed_weights(const std::vector<Tensor>& x) {
  auto& d = *compiled_->dist;
  if (!built()) {
    ModeGuard mode(*this, false);
    NoGradScope no_grad;
    call(rows(x, 0, std::min<std::int64_t>(1, x.at(0).shape()[0])));
  }
  std::vector<Tensor> values;
  for (auto& [n, v] : named_parameters(true)) values.push_back(v.value());
  dist::broadcast_parameters(*d.comm, values, 0);
  d.weights_synced = true;
}

dist::GradientReducer* Model::distributed_reducer(const std::vector<Variable>& vars) {
  auto& d = *compiled_->dist;
  std::vector<std::uint64_t> ids;
  for (auto& v : vars) ids.push_back(v.value().id());
  if (!d.reducer || ids != d.reducer_vars) {
    d.reducer = std::make_unique<dist::GradientReducer>(
        d.comm, vars, dist::ReducerOptions{.bucket_bytes = d.bucket_bytes});
    d.reducer_vars = std::move(ids);
  }
  return d.reducer.get();
}

// ---- fit ------------------------------------------------------------------------------------
History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  return fit(std::vector<Tensor>{x}, std::vector<Tensor>{y}, options);
}

namespace {
// FitOptions::cuda_graph: why the steps of this fit cannot be captured ("" when they can).
std::string step_graph_unavailable(Device dev, const FitOptions& o, bool loss_scale, bool jit,
                                   const optim::Optimizer& opt) {
  if (dev.is_cpu()) return "cuda_graph: the model is on the cpu (CUDA graphs need a CUDA device)";
  if (!soma::detail::has_graph_capture(soma::detail::device_backend(dev.kind)))
    return "cuda_graph: " + dev.str() +
           "'s backend cannot capture (the CPU stand-in device of the tests, or no GPU)";
  if (o.distributed)
    return "cuda_graph: a distributed fit all-reduces the gradients through the host's "
           "communicator every step";
  if (loss_scale)
    return "cuda_graph: f16 loss scaling reads the gradients' finite check on the host every "
           "step to decide whether the step applies (train bf16, or without cuda_graph)";
  if (jit) return "cuda_graph: compile's jit runs the step through graph mode; not captured";
  if (std::string why = opt.capture_unsupported(); !why.empty()) return "cuda_graph: " + why;
  return "";
}

// What a captured step is valid for: the batch's shapes and dtypes, the device, and the
// optimiser's learning rate when it is an op attribute baked into the update kernels (not with
// device step scalars, which a replay reads).
capture::StepSignature step_signature(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                                      const Tensor& sw, Device dev, const optim::Optimizer& opt) {
  capture::StepSignature s;
  for (const auto* part : {&x, &y})
    for (const Tensor& t : *part) {
      s.shapes.push_back(t.shape());
      s.dtypes.push_back(t.dtype());
    }
  if (sw.defined()) {
    s.shapes.push_back(sw.shape());
    s.dtypes.push_back(sw.dtype());
  }
  s.device = dev;
  s.optimizer_key = capture::hash_values({opt.device_step_scalars() ? -1.0 : opt.learning_rate()});
  return s;
}

// FitOptions::cuda_graph: the captured training step of one signature and the input buffers it
// reads (each batch is copied into them before a replay). Destroyed on a new signature and at
// the end of fit.
struct CapturedStep {
  const soma::detail::DeviceBackend* backend = nullptr;
  int index = 0;
  void* graph = nullptr;
  std::vector<Tensor> x, y;
  Tensor sw;
  ~CapturedStep() { drop(); }
  void drop() {
    if (graph) backend->destroy_graph(graph, index);
    graph = nullptr;
    x.clear();
    y.clear();
    sw = Tensor();
  }
};
}  // namespace

History Model::fit(const std::vector<Tensor>& x_all, const std::vector<Tensor>& y_all,
                   const FitOptions& o) {
  check_compiled("fit");
  const std::int64_t n_all = check_xy("fit", x_all, y_all, true);
  check_not_empty("fit", "no training data", x_all, n_all);
  if (o.epochs < 0) fail("fit", "epochs must be >= 0, got ", o.epochs);
  if (o.batch_size <= 0) fail("fit", "batch_size must be positive, got ", o.batch_size);
  if (!(o.validation_split >= 0.0 && o.validation_split < 1.0))
    fail("fit", "validation_split must be in [0, 1), got ", o.validation_split);
  if (o.initial_epoch < 0) fail("fit", "initial_epoch must be >= 0, got ", o.initial_epoch);
  if (o.verbose < 0 || o.verbose > 2) fail("fit", "verbose must be 0, 1 or 2, got ", o.verbose);

  Tensor sw_all = sample_weights(o.class_weight, o.sample_weight, y_all, n_all);

  // Validation data: given, or the last fraction of x/y (before any shuffling, as in Keras).
  std::vector<Tensor> x = x_all, y = y_all, xv, yv;
  Tensor sw = sw_all;
  std::int64_t n = n_all;
  if (o.validation_data) {
    if (o.validation_data->dataset)
      fail("fit", "validation_data is a Dataset; it needs fit(Dataset) (or give tensors here)");
    xv = o.validation_data->x;
    yv = o.validation_data->y;
    check_not_empty("fit", "validation_data is empty",  xv,
                    check_xy("fit (validation_data)", xv, yv, true));
  } else if (o.validation_split > 0.0) {
    n = std::int64_t(std::floor(double(n_all) * (1.0 - o.validation_split)));
    if (n <= 0 || n >= n_all)
      fail("fit", "validation_split ", o.validation_split, " of ", n_all,
           " samples leaves an empty training or validation set");
    xv = rows(x_all, n, n_all);
    yv = rows(y_all, n, n_all);
    x = rows(x_all, 0, n);
    y = rows(y_all, 0, n);
    if (sw.defined()) sw = sw.slice(0, 0, n);
  }
  const std::int64_t bs = effective_batch(o.batch_size, n);
  const std::int64_t steps = batch_count(n, bs);
  const std::int64_t val_bs = o.validation_batch_size > 0 ? o.validation_batch_size : o.batch_size;

  if (o.distributed) begin_distributed(o);
  ScopeExit end_dist{[&] { if (o.distributed) end_distributed(); }};
  const int n_ranks = o.distributed ? dist::world_size() : 1;
  const std::vector<callbacks::CallbackRef> cbs = callbacks_for_rank(o.callbacks, o.distributed);
  callbacks::CallbackList user(cbs), all(cbs);
  if (o.verbose > 0 && (!o.distributed || dist::is_main()))
    all.add(std::make_shared<callbacks::ProgbarLogger>(out_stream(o.output),
                                                       terminal_flag(o.output, o.is_terminal),
                                                       o.verbose));
  all.set_model(this);
  all.set_params({o.epochs, steps, o.verbose});

  History history;
  stop_training = false;
  ModeGuard mode(*this, true);
  Logs logs;
  // FitOptions::cuda_graph: the decision per step (model/step_graph.hpp), its counts kept in
  // step_graph_stats().
  step_graph_stats_ = {};
  std::optional<capture::StepGraphPolicy> graph_policy;
  // Capture possible: device step scalars for the optimiser and in-place device sums for the
  // trackers and metrics, for the whole fit (warm-up steps included, so that every step, eager,
  // captured or replayed, computes the same); both are undone at the end.
  bool capturing_fit = false;
  if (o.cuda_graph) {
    std::string why = step_graph_unavailable(device(), o, compiled_->loss_scale != nullptr,
                                             compiled_->jit, optimizer());
    capturing_fit = why.empty();
    graph_policy.emplace(std::move(why));
  }
  soma::detail::PersistentAccumulatorScope in_place_sums(capturing_fit ||
                                                         soma::detail::persistent_accumulators());
  if (capturing_fit) optimizer().set_device_step_scalars(true);
  ScopeExit scalars_off{[&] { if (capturing_fit) optimizer().set_device_step_scalars(false); }};
  CapturedStep captured;
  // One training step: eager, captured or replayed (model/step_graph.hpp). `y_host`: the
  // labels' host values (sparse losses check them through host twins).
  auto run_step = [&](const std::vector<Tensor>& xb, const std::vector<Tensor>& yb,
                      const Tensor& swb, const std::vector<Tensor>& y_host) {
    if (!graph_policy) return (void)train_step(xb, yb, swb, "fit");
    const Device dev = device();
    auto here = [dev](const Tensor& t) { return !t.defined() || t.device() == dev ? t : t.to(dev); };
    std::vector<Tensor> dx, dy;
    for (const Tensor& t : xb) dx.push_back(here(t));
    for (const Tensor& t : yb) dy.push_back(here(t));
    const Tensor dsw = here(swb);
    std::vector<Tensor> twins_host;
    for (const Tensor& t : y_host) twins_host.push_back(t.defined() && t.device().is_cpu() ? t : Tensor());
    const capture::StepAction action =
        graph_policy->next(step_signature(dx, dy, dsw, dev, optimizer()));
    if (graph_policy->take_dropped()) captured.drop();
    Compiled& c = *compiled_;
    optim::Optimizer& opt = optimizer();
    if (action == capture::StepAction::kEager) {
      soma::detail::HostTwinScope twins(dy, twins_host);
      train_step(dx, dy, dsw, "fit");
    } else if (action == capture::StepAction::kCapture) {
      captured.drop();
      captured.backend = soma::detail::device_backend(dev.kind);
      captured.index = dev.index;
      // The graph's input buffers, made before the capture (they outlive it).
      for (const Tensor& t : dx) captured.x.push_back(copy(t));
      for (const Tensor& t : dy) captured.y.push_back(copy(t));
      if (dsw.defined()) captured.sw = copy(dsw);
      const std::int64_t iterations = opt.iterations();
      const double count = c.count;
      std::string why;
      bool threw = false;
      opt.defer_step_scalars(true);
      // Autocast's kept weight casts: made again inside the graph (ops/autocast_cache.hpp).
      soma::detail::autocast_cache_new_generation();
      captured.backend->begin_capture(captured.index);
      try {
        soma::detail::HostTwinScope twins(captured.y, twins_host);
        train_step(captured.x, captured.y, captured.sw, "fit");
      } catch (const std::exception& e) {
        why = e.what();
        threw = true;
      }
      std::string end_why;
      void* graph = captured.backend->end_capture(captured.index, &end_why);
      soma::detail::autocast_cache_new_generation();
      opt.defer_step_scalars(false);
      if (!threw) why = end_why;
      if (threw && graph) {
        captured.backend->destroy_graph(graph, captured.index);
        graph = nullptr;
      }
      if (!graph) {
        // Nothing of the step ran: its host bookkeeping is undone and it runs eagerly.
        if (opt.iterations() != iterations) opt.rewind_step();
        c.count = count;
        captured.drop();
        graph_policy->captured(false, why);
        soma::detail::HostTwinScope twins(dy, twins_host);
        train_step(dx, dy, dsw, "fit");
      } else {
        captured.graph = graph;
        graph_policy->captured(true);
        opt.flush_step_scalars();
        captured.backend->launch_graph(graph, captured.index);  // the captured work runs now
      }
    } else {  // replay: this batch into the graph's buffers, this step's scalars, the graph
      for (std::size_t i = 0; i < dx.size(); ++i) soma::detail::copy_into(dx[i], captured.x[i]);
      for (std::size_t i = 0; i < dy.size(); ++i) soma::detail::copy_into(dy[i], captured.y[i]);
      if (dsw.defined()) soma::detail::copy_into(dsw, captured.sw);
      opt.replay_step();
      c.count += double(batch_of(dx));
      soma::detail::autocast_cache_new_generation();  // the weights change, their versions do not
      captured.backend->launch_graph(captured.graph, captured.index);
    }
    step_graph_stats_ = graph_policy->stats();
  };
  // On a device, batches go through pinned buffers, copied while the previous step computes
  // (null on the CPU, distributed (per-rank shards), or without a backend's async copies).
  std::unique_ptr<soma::detail::BatchStager> stager;
  if (!o.distributed && steps > 0) stager = soma::detail::BatchStager::make(device(), x, y, sw, bs);
  all.on_train_begin(logs);
  for (int epoch = o.initial_epoch; epoch < o.epochs; ++epoch) {
    reset_metrics();
    train(true);
    Logs epoch_logs;
    all.on_epoch_begin(epoch, epoch_logs);
    Tensor perm;
    if (o.shuffle) {
      std::optional<std::uint64_t> seed;
      if (o.seed) seed = *o.seed + 0x9E3779B97F4A7C15ull * std::uint64_t(epoch + 1);
      if (o.distributed)
        seed = compiled_->dist->seed + 0x9E3779B97F4A7C15ull * std::uint64_t(epoch + 1);
      perm = random_shuffle(arange(double(n), DType::i64), seed);
    }
    if (stager) {
      stager->clear();
      stager->stage(0, std::min(bs, n), perm);
    }
    for (std::int64_t step = 0; step < steps; ++step) {
      std::int64_t start = step * bs, stop = start + std::min(bs, n - start);
      if (o.distributed) {  // this rank's rows of the global batch
        if (stop - start < n_ranks) break;  // a last batch too small to share out is skipped
        if (epoch == o.initial_epoch && step == 0)
          check_same_batch(o.shuffle ? gather_rows(x, perm.slice(0, start, stop))
                                     : rows(x, start, stop));
        const auto [lo, hi] = dist::shard_range(stop - start, dist::rank(), n_ranks);
        compiled_->dist->weight = double(hi - lo) / double(stop - start);
        stop = start + hi;
        start += lo;
      }
      if (stager) {
        soma::detail::StagedBatch b = stager->take();
        // The labels' host copy (a view when not shuffled) for the checks that need values.
        std::vector<Tensor> y_host =
            o.shuffle ? gather_rows(y, perm.slice(0, start, stop)) : rows(y, start, stop);
        Logs batch_logs;
        all.on_train_batch_begin(step, batch_logs);
        {
          soma::detail::HostTwinScope twins(b.y, y_host);
          run_step(b.x, b.y, b.sw, y_host);
        }
        // The next batch's gather and copy while the device runs this step's kernels.
        if (step + 1 < steps) {
          const std::int64_t next = (step + 1) * bs;
          stager->stage(next, next + std::min(bs, n - next), perm);
        }
        if (all.wants_batch_logs(true, step)) batch_logs = collect_logs(true);
        all.on_train_batch_end(step, batch_logs);
        if (stop_training) break;
        continue;
      }
      std::vector<Tensor> xb, yb;
      Tensor swb;
      if (o.shuffle) {
        Tensor idx = perm.slice(0, start, stop);
        xb = gather_rows(x, idx);
        yb = gather_rows(y, idx);
        if (sw.defined()) swb = gather(sw, idx, 0);
      } else {
        xb = rows(x, start, stop);
        yb = rows(y, start, stop);
        if (sw.defined()) swb = sw.slice(0, start, stop);
      }
      Logs batch_logs;
      all.on_train_batch_begin(step, batch_logs);
      run_step(xb, yb, swb, yb);
      // Read only when a callback looks (on a device a read waits for the step); a distributed
      // fit always reads, since collecting is a collective every rank must join.
      if (o.distributed || all.wants_batch_logs(true, step)) batch_logs = collect_logs(true);
      all.on_train_batch_end(step, batch_logs);
      if (stop_training) break;
    }
    epoch_logs = collect_logs(true);
    if (!xv.empty()) {
      Logs val = evaluate_impl(xv, yv, Tensor(), val_bs, user, true);
      for (auto& [k, v] : val) epoch_logs["val_" + k] = v;
    }
    all.on_epoch_end(epoch, epoch_logs);
    history.append(epoch, epoch_logs);
    logs = epoch_logs;
    if (stop_training) break;
  }
  all.on_train_end(logs);
  return history;
}

// ---- fit / evaluate on a Dataset -------------------------------------------------------------
ValidationData::ValidationData(const data::Dataset& ds)
    : dataset(std::make_shared<const data::Dataset>(ds)) {}

namespace {
// A batch {x, y} or {x, y, sample_weight} from a dataset element.
void split_element(const char* who, const data::Element& e, std::vector<Tensor>& x,
                   std::vector<Tensor>& y, Tensor& sw) {
  if (e.size() != 2 && e.size() != 3)
    fail(who, "dataset elements must be {x, y} or {x, y, sample_weight}, got ", e.size(),
         " tensor(s)");
  for (std::size_t i = 0; i < e.size(); ++i)
    if (e[i].defined() && e[i].rank() == 0)
      fail(who, "dataset element component ", i,
           " is a scalar: batch the dataset (dataset.batch(32)) before fit/evaluate");
  x = {e[0]};
  y = {e[1]};
  sw = e.size() == 3 ? e[2] : Tensor();
  check_xy(who, x, y, true);
}
}  // namespace

History Model::fit(const data::Dataset& train_data, const FitOptions& o) {
  check_compiled("fit");
  if (o.epochs < 0) fail("fit", "epochs must be >= 0, got ", o.epochs);
  if (o.initial_epoch < 0) fail("fit", "initial_epoch must be >= 0, got ", o.initial_epoch);
  if (o.verbose < 0 || o.verbose > 2) fail("fit", "verbose must be 0, 1 or 2, got ", o.verbose);
  if (o.steps_per_epoch < 0)
    fail("fit", "steps_per_epoch must be >= 0, got ", o.steps_per_epoch);
  if (o.validation_split > 0.0)
    fail("fit", "validation_split cannot split a Dataset; pass validation_data instead");
  if (o.sample_weight.defined())
    fail("fit", "sample_weight cannot be given with a Dataset; make elements {x, y, weight}");
  const std::int64_t card = train_data.cardinality();
  if (card == data::kInfiniteCardinality && o.steps_per_epoch == 0)
    fail("fit", "the dataset is infinite (repeat() without a count); set steps_per_epoch");
  // The progress bar's target: 0 when the dataset cannot tell its length.
  const std::int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : std::max<std::int64_t>(card, 0);

  if (o.distributed) begin_distributed(o);
  ScopeExit end_dist{[&] { if (o.distributed) end_distributed(); }};
  const std::vector<callbacks::CallbackRef> cbs = callbacks_for_rank(o.callbacks, o.distributed);
  callbacks::CallbackList user(cbs), all(cbs);
  if (o.verbose > 0 && (!o.distributed || dist::is_main()))
    all.add(std::make_shared<callbacks::ProgbarLogger>(out_stream(o.output),
                                                       terminal_flag(o.output, o.is_terminal),
                                                       o.verbose));
  all.set_model(this);
  all.set_params({o.epochs, steps, o.verbose});

  History history;
  stop_training = false;
  ModeGuard mode(*this, true);
  Logs logs;
  step_graph_stats_ = {};
  if (o.cuda_graph)
    step_graph_stats_.reason =
        "cuda_graph: fit(Dataset) trains eagerly (only fit on tensors replays captured steps)";
  all.on_train_begin(logs);
  std::optional<data::Dataset::Iterator> it;
  std::int64_t batches_taken = 0;
  for (int epoch = o.initial_epoch; epoch < o.epochs; ++epoch) {
    reset_metrics();
    train(true);
    Logs epoch_logs;
    all.on_epoch_begin(epoch, epoch_logs);
    if (o.steps_per_epoch == 0 || !it) it.emplace(train_data.iterator());
    for (std::int64_t step = 0; o.steps_per_epoch == 0 || step < o.steps_per_epoch; ++step) {
      std::optional<data::Element> e = it->next();
      if (!e && o.steps_per_epoch > 0 && step > 0) {  // exhausted: a new pass
        it.emplace(train_data.iterator());
        e = it->next();
      }
      if (!e) break;
      ++batches_taken;
      std::vector<Tensor> xb, yb;
      Tensor swb;
      split_element("fit", *e, xb, yb, swb);
      swb = sample_weights(o.class_weight, swb, yb, xb[0].shape()[0]);
      if (o.distributed) {  // each element is a global batch: this rank takes its rows
        const std::int64_t nb = xb[0].shape()[0];
        if (nb < dist::world_size()) continue;  // too small to share out: skipped by every rank
        if (epoch == o.initial_epoch && step == 0) check_same_batch(xb);
        const auto [lo, hi] = dist::shard_range(nb, dist::rank(), dist::world_size());
        compiled_->dist->weight = double(hi - lo) / double(nb);
        xb = rows(xb, lo, hi);
        yb = rows(yb, lo, hi);
        if (swb.defined()) swb = swb.slice(0, lo, hi);
      }
      Logs batch_logs;
      all.on_train_batch_begin(step, batch_logs);
      train_step(xb, yb, swb, "fit");
      // Read only when a callback looks (on a device a read waits for the step); a distributed
      // fit always reads, since collecting is a collective every rank must join.
      if (o.distributed || all.wants_batch_logs(true, step)) batch_logs = collect_logs(true);
      all.on_train_batch_end(step, batch_logs);
      if (stop_training) break;
    }
    if (batches_taken == 0 && !stop_training)
      fail("fit", "no training data: the dataset gave no batch (cardinality ", card, ")");
    if (o.steps_per_epoch == 0) it.reset();  // stops prefetch threads before validation
    epoch_logs = collect_logs(true);
    if (o.validation_data) {
      const ValidationData& vd = *o.validation_data;
      Logs val;
      if (vd.dataset) {
        val = evaluate_dataset_impl(*vd.dataset, user, "fit: validation_data is empty");
      } else {
        check_not_empty("fit", "validation_data is empty", vd.x,
                        check_xy("fit (validation_data)", vd.x, vd.y, true));
        const std::int64_t val_bs =
            o.validation_batch_size > 0 ? o.validation_batch_size : o.batch_size;
        if (val_bs <= 0) fail("fit", "validation batch size must be positive, got ", val_bs);
        val = evaluate_impl(vd.x, vd.y, Tensor(), val_bs, user, true);
      }
      for (auto& [k, v] : val) epoch_logs["val_" + k] = v;
    }
    all.on_epoch_end(epoch, epoch_logs);
    history.append(epoch, epoch_logs);
    logs = epoch_logs;
    if (stop_training) break;
  }
  it.reset();
  all.on_train_end(logs);
  return history;
}

Logs Model::evaluate_dataset_impl(const data::Dataset& data, callbacks::CallbackList& cbs,
                                  const char* empty_error) {
  reset_metrics();
  ModeGuard mode(*this, false);
  Logs logs;
  cbs.on_test_begin(logs);
  auto it = data.iterator();
  for (std::int64_t step = 0;; ++step) {
    std::optional<data::Element> e = it.next();
    if (!e) {
      if (step == 0) throw Error(std::string(empty_error) + ": the dataset gave no batch");
      break;
    }
    std::vector<Tensor> xb, yb;
    Tensor swb;
    split_element("evaluate", *e, xb, yb, swb);
    if (swb.defined()) swb = sample_weights({}, swb, yb, xb[0].shape()[0]);
    if (compiled_->dist) {  // distributed validation: this rank's rows of every batch
      const auto [lo, hi] =
          dist::shard_range(xb[0].shape()[0], dist::rank(), dist::world_size());
      xb = rows(xb, lo, hi);
      yb = rows(yb, lo, hi);
      if (swb.defined()) swb = swb.slice(0, lo, hi);
    }
    Logs batch_logs;
    cbs.on_test_batch_begin(step, batch_logs);
    if (xb[0].shape()[0] > 0) test_step(xb, yb, swb);
    if (cbs.wants_batch_logs(false, step)) batch_logs = collect_logs();
    cbs.on_test_batch_end(step, batch_logs);
  }
  logs = collect_logs(true);
  cbs.on_test_end(logs);
  return logs;
}

Logs Model::evaluate(const data::Dataset& data, const EvaluateOptions& o) {
  check_compiled("evaluate");
  if (o.sample_weight.defined())
    fail("evaluate", "sample_weight cannot be given with a Dataset; make elements {x, y, weight}");
  callbacks::CallbackList cbs(o.callbacks);
  if (o.verbose > 0) {
    auto bar = std::make_shared<callbacks::ProgbarLogger>(
        out_stream(o.output), terminal_flag(o.output, o.is_terminal), o.verbose);
    bar->set_test_steps(std::max<std::int64_t>(data.cardinality(), 0));
    cbs.add(bar);
  }
  cbs.set_model(this);
  return evaluate_dataset_impl(data, cbs, "evaluate: no data");
}

// ---- evaluate / predict ---------------------------------------------------------------------
Logs Model::evaluate_impl(const std::vector<Tensor>& x_all, const std::vector<Tensor>& y_all,
                          const Tensor& sw_all, std::int64_t bs, callbacks::CallbackList& cbs,
                          bool is_validation) {
  (void)is_validation;
  std::vector<Tensor> x = x_all, y = y_all;
  Tensor sw = sw_all;
  if (compiled_->dist) {  // distributed validation: each rank its share, collect_logs averages
    const auto [lo, hi] = dist::shard_range(x[0].shape()[0], dist::rank(), dist::world_size());
    x = rows(x_all, lo, hi);
    y = rows(y_all, lo, hi);
    if (sw.defined()) sw = sw_all.slice(0, lo, hi);
  }
  const std::int64_t n = x[0].shape()[0];
  bs = effective_batch(bs, n);
  const std::int64_t steps = batch_count(n, bs);
  reset_metrics();
  ModeGuard mode(*this, false);
  std::unique_ptr<soma::detail::BatchStager> stager;
  if (steps > 0) stager = soma::detail::BatchStager::make(device(), x, y, sw, bs);
  if (stager) stager->stage(0, std::min(bs, n));
  Logs logs;
  cbs.on_test_begin(logs);
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t start = step * bs, stop = start + std::min(bs, n - start);
    Logs batch_logs;
    cbs.on_test_batch_begin(step, batch_logs);
    if (stager) {
      soma::detail::StagedBatch b = stager->take();
      {
        soma::detail::HostTwinScope twins(b.y, rows(y, start, stop));
        test_step(b.x, b.y, b.sw);
      }
      if (step + 1 < steps) {
        const std::int64_t next = (step + 1) * bs;
        stager->stage(next, next + std::min(bs, n - next));
      }
    } else {
      test_step(rows(x, start, stop), rows(y, start, stop),
                sw.defined() ? sw.slice(0, start, stop) : Tensor());
    }
    if (cbs.wants_batch_logs(false, step)) batch_logs = collect_logs();
    cbs.on_test_batch_end(step, batch_logs);
  }
  logs = collect_logs(true);
  cbs.on_test_end(logs);
  return logs;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options) {
  return evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y}, options);
}

Logs Model::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                     const EvaluateOptions& o) {
  check_compiled("evaluate");
  const std::int64_t n = check_xy("evaluate", x, y, true);
  check_not_empty("evaluate", "no data", x, n);
  if (o.batch_size <= 0) fail("evaluate", "batch_size must be positive, got ", o.batch_size);
  Tensor sw;
  if (o.sample_weight.defined()) sw = sample_weights({}, o.sample_weight, y, n);
  callbacks::CallbackList cbs(o.callbacks);
  if (o.verbose > 0) {
    auto bar = std::make_shared<callbacks::ProgbarLogger>(
        out_stream(o.output), terminal_flag(o.output, o.is_terminal), o.verbose);
    bar->set_test_steps(batch_count(n, effective_batch(o.batch_size, n)));
    cbs.add(bar);
  }
  cbs.set_model(this);
  return evaluate_impl(x, y, sw, o.batch_size, cbs, false);
}

Tensor Model::predict(const Tensor& x, const PredictOptions& options) {
  auto out = predict(std::vector<Tensor>{x}, options);
  if (out.size() != 1)
    fail("predict", "the model gives ", out.size(),
         " outputs; call predict with a vector of inputs to get them all");
  return out[0];
}

std::vector<Tensor> Model::predict(const std::vector<Tensor>& x, const PredictOptions& o) {
  const std::int64_t n = check_xy("predict", x, {}, false);
  if (o.batch_size <= 0) fail("predict", "batch_size must be positive, got ", o.batch_size);
  const std::int64_t bs = effective_batch(o.batch_size, n);
  const std::int64_t steps = batch_count(n, bs);
  callbacks::CallbackList cbs(o.callbacks);
  if (o.verbose > 0) {
    auto bar = std::make_shared<callbacks::ProgbarLogger>(
        out_stream(o.output), terminal_flag(o.output, o.is_terminal), o.verbose);
    bar->set_test_steps(steps);
    cbs.add(bar);
  }
  cbs.set_model(this);
  ModeGuard mode(*this, false);
  NoGradScope no_grad;
  StepPrecision autocast(compiled_ ? compiled_->precision : std::nullopt);
  std::vector<std::vector<Tensor>> parts;
  // Batches go to the model's device; the predictions come back where x is (host arrays for host
  // inputs, as Keras returns), in one copy per output at the end.
  const Device dev = device();
  const Device home = x[0].device();
  std::unique_ptr<soma::detail::BatchStager> stager;
  if (steps > 0) stager = soma::detail::BatchStager::make(dev, x, {}, Tensor(), bs);
  if (stager) stager->stage(0, std::min(bs, n));
  Logs logs;
  cbs.on_predict_begin(logs);
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t start = step * bs, stop = start + std::min(bs, n - start);
    Logs batch_logs;
    cbs.on_predict_batch_begin(step, batch_logs);
    std::vector<Tensor> xb;
    if (stager) {
      xb = stager->take().x;
    } else {
      xb = rows(x, start, stop);
      for (auto& t : xb)
        if (t.device() != dev) t = t.to(dev);
    }
    std::vector<Tensor> out = call(xb);
    if (stager && step + 1 < steps) {
      const std::int64_t next = (step + 1) * bs;
      stager->stage(next, next + std::min(bs, n - next));
    }
    if (parts.empty()) parts.resize(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) parts[i].push_back(out[i]);
    cbs.on_predict_batch_end(step, batch_logs);
  }
  if (n == 0) {
    // No samples: zero rows of each output (as Keras gives). The per-sample output shapes come
    // from one sample of zeros.
    std::vector<Tensor> probe;
    for (const Tensor& t : x) {
      Shape s = t.shape();
      s[0] = 1;
      probe.push_back(zeros(s, t.dtype()).to(dev));
    }
    for (const Tensor& out : call(probe)) parts.push_back({out.slice(0, 0, 0)});
  }
  cbs.on_predict_end(logs);
  std::vector<Tensor> result;
  for (auto& p : parts) {
    Tensor r = p.size() == 1 ? p[0] : concat(p, 0);
    result.push_back(r.device() == home ? r : r.to(home));
  }
  return result;
}

Tensor Model::predict_on_batch(const Tensor& x) {
  // Pooled vectors (internal/tensor_vector_pool.hpp): batch-1 latency is a few microseconds, of
  // which a heap allocation per vector was a visible part.
  std::vector<Tensor> in = soma::detail::take_tensor_vector();
  in.push_back(x);
  std::vector<Tensor> out = predict_on_batch(in);
  soma::detail::give_back_tensor_vector(std::move(in));
  if (out.size() != 1)
    fail("predict_on_batch", "the model gives ", out.size(),
         " outputs; pass a vector of inputs to get them all");
  Tensor y = std::move(out[0]);
  soma::detail::give_back_tensor_vector(std::move(out));
  return y;
}

std::vector<Tensor> Model::predict_on_batch(const std::vector<Tensor>& x) {
  check_xy("predict_on_batch", x, {}, false);
  ModeGuard mode(*this, false);
  NoGradScope no_grad;
  StepPrecision autocast(compiled_ ? compiled_->precision : std::nullopt);
  // As predict: computed on the model's device, returned where x is.
  const Device dev = device(), home = x[0].device();
  if (dev == home) return call(x);
  std::vector<Tensor> xd = x;
  for (auto& t : xd)
    if (t.device() != dev) t = t.to(dev);
  std::vector<Tensor> out = call(xd);
  for (auto& t : out)
    if (t.device() != home) t = t.to(home);
  return out;
}

Logs Model::train_on_batch(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  return train_on_batch(std::vector<Tensor>{x}, std::vector<Tensor>{y}, sample_weight);
}

Logs Model::train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                           const Tensor& sample_weight) {
  check_compiled("train_on_batch");
  const std::int64_t n = check_xy("train_on_batch", x, y, true);
  check_not_empty("train_on_batch", "no data", x, n);
  Tensor sw = sample_weight.defined() ? sample_weights({}, sample_weight, y, n) : Tensor();
  reset_metrics();
  ModeGuard mode(*this, true);
  train_step(x, y, sw, "train_on_batch");
  return collect_logs();
}

Logs Model::test_on_batch(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  check_compiled("test_on_batch");
  std::vector<Tensor> xs{x}, ys{y};
  const std::int64_t n = check_xy("test_on_batch", xs, ys, true);
  check_not_empty("test_on_batch", "no data", xs, n);
  Tensor sw = sample_weight.defined() ? sample_weights({}, sample_weight, ys, n) : Tensor();
  reset_metrics();
  ModeGuard mode(*this, false);
  test_step(xs, ys, sw);
  return collect_logs();
}

// ---- weights --------------------------------------------------------------------------------
std::vector<LossRef> Model::compiled_losses() const {
  return compiled_ ? compiled_->losses : std::vector<LossRef>{};
}
std::vector<std::vector<metrics::MetricRef>> Model::compiled_metrics() const {
  return compiled_ ? compiled_->metrics : std::vector<std::vector<metrics::MetricRef>>{};
}
std::vector<double> Model::compiled_loss_weights() const {
  return compiled_ ? compiled_->loss_weights : std::vector<double>{};
}


// ---- summary --------------------------------------------------------------------------------
void Model::print_totals(std::ostream& os) const {
  std::int64_t total = 0, trainable = 0;
  std::int64_t total_bytes = 0, trainable_bytes = 0;
  for (auto& [n, v] : named_parameters(true)) {
    const std::int64_t k = numel(v.shape());
    const std::int64_t b = k * std::int64_t(dtype_size(v.dtype()));
    total += k;
    total_bytes += b;
    if (v.trainable()) {
      trainable += k;
      trainable_bytes += b;
    }
  }
  os << " Total params: " << detail::thousands(total) << " (" << detail::human_bytes(total_bytes)
     << ")\n";
  os << " Trainable params: " << detail::thousands(trainable) << " ("
     << detail::human_bytes(trainable_bytes) << ")\n";
  os << " Non-trainable params: " << detail::thousands(total - trainable) << " ("
     << detail::human_bytes(total_bytes - trainable_bytes) << ")\n";
}

void Model::summary(std::ostream& os) const {
  if (graph_) return summary_functional(os);
  if (!built())
    fail("summary", "model '", name(),
         "' is not built yet: call it on a batch first (or build_for({-1, ...}))");
  // A subclassed model: one row per child; output shapes are not tracked.
  detail::SummaryTable table({"Layer (type)", "Output Shape", "Param #"}, {31, 22, 13});
  for (auto& [cname, child] : named_children())
    table.add_row({child->name() + " (" + child->type_name() + ")", "?",
                   detail::thousands(child->count_params())});
  os << "Model: \"" << name() << "\"\n";
  table.print(os);
  print_totals(os);
}

void Model::summary_functional(std::ostream& os) const {
  detail::SummaryTable table({"Layer (type)", "Output Shape", "Param #", "Connected to"},
                             {31, 22, 13, 20});
  // Keras' "layer[node][tensor]": which call of a (possibly shared) layer, which of its outputs.
  std::unordered_map<const detail::SymbolicNode*, int> node_index;
  std::unordered_map<const Module*, int> calls;
  for (auto& n : graph_->nodes)
    node_index[n.get()] = n->layer ? calls[n->layer.get()]++ : 0;
  auto ref = [&](const SymbolicTensor& t) {
    return t.name() + "[" + std::to_string(node_index.at(t.node().get())) + "][" +
           std::to_string(t.index()) + "]";
  };
  for (auto& in : inputs_)
    table.add_row({in.name() + " (InputLayer)", format_shape(in.shape()), "0", "-"});
  std::unordered_set<const Module*> shown;
  for (auto& n : graph_->nodes) {
    if (!n->layer || !shown.insert(n->layer.get()).second) continue;  // shared: listed once
    std::string connected;
    for (auto& m : graph_->nodes) {
      if (m->layer.get() != n->layer.get()) continue;
      for (auto& in : m->inputs) connected += (connected.empty() ? "" : ", ") + ref(in);
    }
    std::string shape = format_shape(n->shapes[0]);
    for (std::size_t i = 1; i < n->shapes.size(); ++i) shape += ", " + format_shape(n->shapes[i]);
    table.add_row({n->layer->name() + " (" + n->layer->type_name() + ")", shape,
                   detail::thousands(n->layer->count_params()), connected});
  }
  os << "Model: \"" << name() << "\"\n";
  table.print(os);
  print_totals(os);
}

}  // namespace soma::model
