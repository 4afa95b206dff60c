#pragma once
// nn::Model: a Module that can be trained Keras-style (compile / fit / evaluate / predict).
// Three ways to get one:
//   - nn::Sequential{layers...} (sequential.hpp), a Model subclass;
//   - the functional API: nn::Model(inputs, outputs) over symbolic tensors (functional.hpp);
//   - subclassing: derive from nn::Model and override forward() (or call()) and type_name().
// Model lives in soma::nn next to Module, since a model is also a layer (it can be nested).
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "soma/model/callbacks.hpp"
#include "soma/model/functional.hpp"
#include "soma/model/history.hpp"
#include "soma/nn/loss.hpp"
#include "soma/nn/metric.hpp"
#include "soma/nn/module.hpp"
#include "soma/optim/optimizer.hpp"
#include "soma/ref.hpp"

namespace soma::data {
class Dataset;
}
namespace soma::dist {
class GradientReducer;
}

namespace soma::model {

using nn::LossRef;
using nn::Lowering;  // layers lower themselves to ops (soma/nn/lowering.hpp)
using nn::LoweredValue;

struct CompileOptions {
  // One weight per output: the total loss is sum_i loss_weights[i] * loss_i. Empty: all 1.
  std::vector<double> loss_weights;
  // Train through a traced step (soma::function, docs/graph.md): after a first eager step, which
  // builds the layers and the optimiser's slots, forward pass, loss and gradients run as a graph
  // planned once per batch shape; the optimiser applies the gradients as in eager mode. Layers
  // that draw random numbers or update state in their forward pass (Dropout, BatchNormalization)
  // would be frozen by the trace: keep jit off for them.
  bool jit = false;
  // "bf16" (or "f16"): every training, evaluation and prediction step runs its forward and
  // backward pass inside soma::AutocastScope (soma/autocast.hpp): matrix and convolution work in
  // that dtype with f32 accumulation; weights, losses, gradients and the optimiser stay f32.
  // Empty or "f32": off. "f16" also wraps the optimiser in an optim::LossScaleOptimizer
  // (soma/optim/loss_scale.hpp; unless it is one already) and trains on the scaled loss, as
  // Keras' mixed_float16 policy: model.optimizer() is then the wrapper. Loss scaling runs eager
  // steps (jit is ignored with it).
  std::string mixed_precision;
};

// A compile() argument given as an object or by its Keras name:
//   model.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
//   model.compile(optim::Adam({.learning_rate = 1e-3}), "mse", {"mae"});
// Names are resolved with default options when compile() runs (an unknown name is a
// soma::Error listing the known ones); "accuracy" is the variant that goes with the loss.
template <class R>
class RefOrName {
 public:
  RefOrName(const char* name) : name_(name ? name : ""), by_name_(true) {}  // NOLINT: implicit
  RefOrName(std::string name) : name_(std::move(name)), by_name_(true) {}   // NOLINT
  template <class T>
    requires(std::constructible_from<R, T> && !std::convertible_to<T, std::string> &&
             !std::is_same_v<std::decay_t<T>, RefOrName>)
  RefOrName(T&& value) : ref_(std::forward<T>(value)) {}  // NOLINT
  bool is_name() const { return by_name_; }
  const R& ref() const { return ref_; }
  const std::string& name() const { return name_; }

 private:
  R ref_;
  std::string name_;
  bool by_name_ = false;
};
using OptimizerArg = RefOrName<optim::OptimizerRef>;
using LossArg = RefOrName<LossRef>;
using MetricArg = RefOrName<metrics::MetricRef>;
// compile()'s metrics: a braced list of objects and names ({"accuracy", metrics::AUC()}), or a
// std::vector<MetricRef>.
class MetricArgs {
 public:
  MetricArgs() = default;
  MetricArgs(std::initializer_list<MetricArg> metrics) : list_(metrics) {}  // NOLINT
  MetricArgs(const std::vector<metrics::MetricRef>& metrics)                // NOLINT
      : list_(metrics.begin(), metrics.end()) {}
  MetricArgs(const std::vector<std::string>& names) : list_(names.begin(), names.end()) {}  // NOLINT
  const std::vector<MetricArg>& list() const { return list_; }

 private:
  std::vector<MetricArg> list_;
};

// Validation data for fit(): one input and one target (`{{x_val, y_val}}`), or vectors of them
// for models with several inputs/outputs, or a batched data::Dataset of {x, y} elements.
struct ValidationData {
  std::vector<Tensor> x, y;
  std::shared_ptr<const data::Dataset> dataset;  // set when built from a Dataset
  ValidationData(Tensor x_, Tensor y_) : x{std::move(x_)}, y{std::move(y_)} {}
  ValidationData(std::vector<Tensor> x_, std::vector<Tensor> y_)
      : x(std::move(x_)), y(std::move(y_)) {}
  ValidationData(const data::Dataset& ds);  // NOLINT: implicit, so `.validation_data = test`
};

struct FitOptions {
  int epochs = 1;
  std::int64_t batch_size = 32;
  bool shuffle = true;  // a new permutation every epoch, drawn from soma's seeded RNG
  std::optional<ValidationData> validation_data;
  double validation_split = 0.0;  // the last fraction of x/y, taken before shuffling
  std::map<std::int64_t, double> class_weight;  // class id -> weight of its samples' loss
  Tensor sample_weight;                         // [n]: per-sample loss weights
  std::vector<callbacks::CallbackRef> callbacks;
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  int initial_epoch = 0;
  std::optional<std::uint64_t> seed;  // shuffling seed; default: soma's global seed and counter
  std::int64_t validation_batch_size = 0;  // 0: batch_size
  // Where progress goes (default std::cout) and whether it is a terminal (default: isatty of
  // stdout when writing to std::cout, else false).
  std::ostream* output = nullptr;
  std::optional<bool> is_terminal;
  // fit(Dataset) only: batches per epoch. 0: one full pass of the dataset per epoch. With a
  // count, one iterator runs on across epochs and restarts when exhausted (needed for a
  // repeat()ed, infinite dataset).
  std::int64_t steps_per_epoch = 0;
  // Data-parallel training over the ranks of soma::dist (run under mpirun; docs/distributed.md).
  // batch_size is the global batch: each rank trains on its share of every batch, the gradients
  // are averaged with all-reduce (buckets of distributed_bucket_bytes, overlapped with the
  // backward pass), the weights start from rank 0's, logs are averaged over the ranks, validation
  // is split among them, and only rank 0 shows progress and runs the callbacks that write files
  // (ModelCheckpoint, CSVLogger, TensorBoard). With one process it trains as without the option.
  bool distributed = false;
  std::int64_t distributed_bucket_bytes = 1 << 20;
  // Replay the training step as a CUDA graph once its shapes are fixed (docs/cuda.md, "CUDA
  // graphs"): off by default. Only on a CUDA device with a GPU present; everything else (the
  // CPU, the test stand-in, a step that cannot be captured) trains eagerly as without it, and
  // the reason is in Model::step_graph_stats().
  bool cuda_graph = false;
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  int verbose = 1;
  Tensor sample_weight;
  std::vector<callbacks::CallbackRef> callbacks;
  std::ostream* output = nullptr;
  std::optional<bool> is_terminal;
};

struct PredictOptions {
  std::int64_t batch_size = 32;
  int verbose = 0;
  std::vector<callbacks::CallbackRef> callbacks;
  std::ostream* output = nullptr;
  std::optional<bool> is_terminal;
};

// What FitOptions::cuda_graph did in the last fit (docs/cuda.md, "CUDA graphs").
struct StepGraphStats {
  std::int64_t eager_steps = 0;    // steps run eagerly (warm-up, or no capture possible)
  std::int64_t captures = 0;       // graphs captured
  std::int64_t replays = 0;        // steps replayed from a captured graph
  std::int64_t invalidations = 0;  // graphs dropped (shapes, dtypes or optimiser changed)
  std::string reason;              // why the last step was not replayed ("" when it was)
};

class Model : public Module {
 public:
  // Functional model from symbolic inputs to symbolic outputs (see functional.hpp).
  Model(const SymbolicTensor& input, const SymbolicTensor& output);
  Model(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs);

  std::string type_name() const override { return graph_ ? "Functional" : "Model"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  // The model's inputs when it is lowered on its own (ONNX export): shapes with the batch axis
  // -1, dtypes. l.fail where it cannot say (a subclassed model; an unbuilt Sequential).
  virtual std::vector<TensorSpec> lowered_inputs(Lowering& l) const;
  // A functional model's single output's activation (see nn::output_activation).
  std::string output_activation_name() const override;

  using Module::operator();
  // Several inputs (functional models); returns every output.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) { return call(inputs); }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;

  // ---- training configuration ----
  // Each argument an object or a Keras name (see RefOrName above).
  void compile(OptimizerArg optimizer, LossArg loss, MetricArgs metrics = {},
               CompileOptions options = {});
  // Several outputs: one loss per output, and for each output its own metric objects.
  void compile(optim::OptimizerRef optimizer, std::vector<LossRef> losses,
               std::vector<std::vector<metrics::MetricRef>> metrics = {},
               CompileOptions options = {});
  bool compiled() const { return optimizer_.get() != nullptr; }
  optim::Optimizer& optimizer() const;
  // Names in logs, in display order: "loss", then per-output losses, then metrics.
  std::vector<std::string> metrics_names() const;

  // ---- training and inference ----
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
              const FitOptions& options = {});
  // A batched Dataset of {x, y} or {x, y, sample_weight} elements. batch_size, shuffle,
  // validation_split and sample_weight of the options do not apply (the dataset decides).
  History fit(const data::Dataset& train, const FitOptions& options = {});
  Logs evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options = {});
  Logs evaluate(const data::Dataset& data, const EvaluateOptions& options = {});
  Logs evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                const EvaluateOptions& options = {});
  Tensor predict(const Tensor& x, const PredictOptions& options = {});  // one output
  std::vector<Tensor> predict(const std::vector<Tensor>& x, const PredictOptions& options = {});
  // One step on one batch; metrics cover this batch only (Keras' reset_metrics=True).
  Logs train_on_batch(const Tensor& x, const Tensor& y, const Tensor& sample_weight = Tensor());
  Logs train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                      const Tensor& sample_weight = Tensor());
  Logs test_on_batch(const Tensor& x, const Tensor& y, const Tensor& sample_weight = Tensor());
  Tensor predict_on_batch(const Tensor& x);  // eval mode, no tape
  std::vector<Tensor> predict_on_batch(const std::vector<Tensor>& x);

  // FitOptions::cuda_graph's counters for the last fit.
  const StepGraphStats& step_graph_stats() const { return step_graph_stats_; }

  // Set by a callback (EarlyStopping, TerminateOnNaN) to end fit() after the current batch.
  bool stop_training = false;

  // ---- weights ----
  std::map<std::string, Tensor> get_weights() const { return state_dict(); }
  void set_weights(const std::map<std::string, Tensor>& w) { load_state_dict(w); }
  // Weights alone, keyed by layer name (a subclassed model's layers: by the name they were
  // registered under; docs/model-format.md). load_weights matches them by that name and refuses
  // missing/unexpected layers or shape mismatches, naming them all; it also reads the older
  // position-keyed SOMAWTS1 files.
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path);
  // One file with the architecture, the compile config, the weights and the optimiser state;
  // soma::load_model (soma/model/serialization.hpp) rebuilds the model. Sequential and
  // functional models; a subclassed model needs serialization::register_model (else it throws).
  void save(const std::string& path) const;
  // Keras' files (soma/model/keras.hpp, docs/keras.md): the built model that a Keras
  // model.to_json() describes, and the weights of a Keras .weights.h5 (or Keras 2 .h5) file
  // loaded into such a model (layers matched by name; needs soma built with HDF5).
  static std::shared_ptr<Model> from_keras_json(const std::string& json);
  void load_keras_weights(const std::string& path);

  // What compile() was given (empty before compile()).
  std::vector<LossRef> compiled_losses() const;
  std::vector<std::vector<metrics::MetricRef>> compiled_metrics() const;
  std::vector<double> compiled_loss_weights() const;

  // Keras' summary table; the model must be built (an Input, build_for(shape) or one call).
  virtual void summary(std::ostream& os = std::cout) const;

  // Functional graph access (empty for other models).
  const std::vector<SymbolicTensor>& inputs() const { return inputs_; }
  const std::vector<SymbolicTensor>& outputs() const { return outputs_; }

 protected:
  Model() = default;  // for subclasses

  Tensor forward(const Tensor& x) override;
  // Runs the model on a batch: the functional graph, or operator() for one input.
  std::vector<Tensor> run(const std::vector<Tensor>& x);
  void print_totals(std::ostream& os) const;

 private:
  struct Graph;
  struct Compiled;

  // Losses, metrics, progress: the per-batch work shared by fit/evaluate/train_on_batch. `who`
  // ("fit", "train_on_batch") names the caller in errors.
  Logs train_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                  const Tensor& sample_weight, const char* who);
  // Throws when `vars` (the trainable parameters) is empty: training would change nothing.
  void check_trainable(const std::vector<Variable>& vars, const char* who) const;
  void test_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                 const Tensor& sample_weight);
  void reset_metrics();
  // across_ranks: averaged over the ranks of a distributed fit (a collective: every rank calls it).
  Logs collect_logs(bool across_ranks = false) const;
  Logs evaluate_impl(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                     const Tensor& sample_weight, std::int64_t batch_size,
                     callbacks::CallbackList& cbs, bool is_validation);
  // `empty_error`: the message prefix when the dataset gives no batch ("evaluate: no data").
  Logs evaluate_dataset_impl(const data::Dataset& data, callbacks::CallbackList& cbs,
                             const char* empty_error);
  void check_compiled(const char* what) const;
  // FitOptions::distributed (model.cpp, docs/distributed.md).
  void begin_distributed(const FitOptions& options);
  void end_distributed();
  void sync_distributed_weights(const std::vector<Tensor>& x);
  dist::GradientReducer* distributed_reducer(const std::vector<Variable>& vars);
  void summary_functional(std::ostream& os) const;

  std::shared_ptr<const Graph> graph_;
  std::vector<SymbolicTensor> inputs_, outputs_;
  std::shared_ptr<Compiled> compiled_;
  optim::OptimizerRef optimizer_;
  StepGraphStats step_graph_stats_;
};

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::CompileOptions;
using model::RefOrName;
using model::OptimizerArg;
using model::LossArg;
using model::MetricArg;
using model::MetricArgs;
using model::ValidationData;
using model::FitOptions;
using model::EvaluateOptions;
using model::PredictOptions;
using model::Model;
}  // namespace soma::nn
