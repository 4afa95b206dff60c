#pragma once
// Callbacks: hooks fit() / evaluate() / predict() call at train, epoch, batch and test begin and
// end, with Keras' names and defaults.
//
//   model.fit(x, y, {.epochs = 100, .validation_split = 0.2,
//                    .callbacks = {callbacks::EarlyStopping({.patience = 5,
//                                                             .restore_best_weights = true}),
//                                  callbacks::CSVLogger("log.csv")}});
//
// A callback passed by value is copied into fit(); pass a std::shared_ptr to read its state
// afterwards (e.g. EarlyStopping::stopped_epoch()).
#include <cstdint>
#include <fstream>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "soma/model/history.hpp"
#include "soma/optim/schedules.hpp"
#include "soma/ref.hpp"
#include "soma/tensor.hpp"

namespace soma::model {
class Model;
}
namespace soma::nn {
using model::Model;  // source compatibility (model.hpp)
}

namespace soma::callbacks {

using model::Logs;

// What fit() tells callbacks before training starts.
struct TrainParams {
  int epochs = 1;
  std::int64_t steps = 0;  // batches per epoch
  int verbose = 0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void set_model(nn::Model* model) { model_ = model; }
  virtual void set_params(const TrainParams& params) { params_ = params; }

  // Epoch-end and batch-end logs may be extended by a callback (e.g. "learning_rate"); later
  // callbacks and the History see the additions.
  virtual void on_train_begin(Logs& logs) { (void)logs; }
  virtual void on_train_end(Logs& logs) { (void)logs; }
  virtual void on_epoch_begin(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  virtual void on_epoch_end(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  virtual void on_train_batch_begin(std::int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  virtual void on_train_batch_end(std::int64_t batch, Logs& logs) {
    (void)batch, (void)logs;
    train_batch_end_is_default_ = true;
  }
  virtual void on_test_begin(Logs& logs) { (void)logs; }
  virtual void on_test_end(Logs& logs) { (void)logs; }
  virtual void on_test_batch_begin(std::int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  virtual void on_test_batch_end(std::int64_t batch, Logs& logs) {
    (void)batch, (void)logs;
    test_batch_end_is_default_ = true;
  }
  virtual void on_predict_begin(Logs& logs) { (void)logs; }
  virtual void on_predict_end(Logs& logs) { (void)logs; }
  virtual void on_predict_batch_begin(std::int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  virtual void on_predict_batch_end(std::int64_t batch, Logs& logs) { (void)batch, (void)logs; }

  // Whether on_train_batch_end (training) or on_test_batch_end reads the logs of `batch`. fit and
  // evaluate collect the running loss and metrics for a batch only when a callback wants them:
  // on a device that read waits for the step, so training with no such callback reads nothing
  // back inside an epoch; the others get empty logs. Default: every batch, until the callback's
  // hook turns out to be the base class's no-op (noticed on its first call).
  virtual bool wants_batch_logs(bool training, std::int64_t batch) const {
    (void)batch;
    return !(training ? train_batch_end_is_default_ : test_batch_end_is_default_);
  }

 protected:
  nn::Model& model() const;  // throws when no model is set
  bool has_model() const { return model_ != nullptr; }
  const TrainParams& params() const { return params_; }

 private:
  nn::Model* model_ = nullptr;
  TrainParams params_;
  bool train_batch_end_is_default_ = false, test_batch_end_is_default_ = false;

 public:
  // True for callbacks that write files (checkpoints, logs): a distributed fit runs them on
  // rank 0 only.
  virtual bool writes_files() const { return false; }
};
using CallbackRef = Ref<Callback>;

// Calls every callback of a list in order (used by fit/evaluate/predict).
class CallbackList {
 public:
  CallbackList() = default;
  explicit CallbackList(std::vector<CallbackRef> cbs) : cbs_(std::move(cbs)) {}
  void add(CallbackRef cb) { cbs_.push_back(std::move(cb)); }
  void set_model(nn::Model* m);
  void set_params(const TrainParams& p);
  void on_train_begin(Logs& logs);
  void on_train_end(Logs& logs);
  void on_epoch_begin(int epoch, Logs& logs);
  void on_epoch_end(int epoch, Logs& logs);
  void on_train_batch_begin(std::int64_t batch, Logs& logs);
  void on_train_batch_end(std::int64_t batch, Logs& logs);
  void on_test_begin(Logs& logs);
  void on_test_end(Logs& logs);
  void on_test_batch_begin(std::int64_t batch, Logs& logs);
  void on_test_batch_end(std::int64_t batch, Logs& logs);
  // Whether some callback wants the logs of this batch (Callback::wants_batch_logs).
  bool wants_batch_logs(bool training, std::int64_t batch) const;
  void on_predict_begin(Logs& logs);
  void on_predict_end(Logs& logs);
  void on_predict_batch_begin(std::int64_t batch, Logs& logs);
  void on_predict_batch_end(std::int64_t batch, Logs& logs);
  std::size_t size() const { return cbs_.size(); }

 private:
  std::vector<CallbackRef> cbs_;
};

// User hooks as functions; unset hooks do nothing. An aggregate, so that designated
// initialisers work (the fields in this order):
//   .callbacks = {callbacks::LambdaCallback{.on_epoch_end_fn = [&](int epoch, nn::Logs& logs) {
//     ...
//   }}}
// It is not a Callback itself (an aggregate cannot override virtual functions): a CallbackRef
// made from it copies it, one made from a std::shared_ptr<LambdaCallback> shares it.
struct LambdaCallback {
  std::function<void(Logs&)> on_train_begin_fn, on_train_end_fn;
  std::function<void(int, Logs&)> on_epoch_begin_fn, on_epoch_end_fn;
  std::function<void(std::int64_t, Logs&)> on_train_batch_begin_fn, on_train_batch_end_fn;
  std::function<void(Logs&)> on_test_begin_fn, on_test_end_fn;
  std::function<void(std::int64_t, Logs&)> on_test_batch_begin_fn, on_test_batch_end_fn;
};
// The Callback that calls a LambdaCallback's functions (used by CallbackRef, see soma/ref.hpp).
std::shared_ptr<Callback> ref_adapt(std::shared_ptr<LambdaCallback> fns);

// "min", "max" or "auto" (max when the monitor's name contains "acc", "auc", "precision",
// "recall" or "f1", else min).
bool monitor_maximises(const std::string& monitor, const std::string& mode, const char* who);

// ---- ModelCheckpoint ------------------------------------------------------------------------
struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  std::string mode = "auto";
  bool save_weights_only = true;  // false: Model::save (architecture + optimiser state too)
};
// Saves the weights at the end of epochs. filepath may hold fields: {epoch} (1-based, as in
// Keras), {epoch:02d}, or any log key such as {val_loss:.4f}.
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions options = {});
  bool wants_batch_logs(bool, std::int64_t) const override { return false; }  // epochs only
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  double best() const { return best_; }
  const std::vector<std::string>& saved_paths() const { return saved_; }
  bool writes_files() const override { return true; }

 private:
  std::string filepath_;
  ModelCheckpointOptions o_;
  bool maximise_ = false;
  double best_ = 0.0;
  std::vector<std::string> saved_;
};
// Formats a checkpoint path template (see ModelCheckpoint).
std::string format_filepath(const std::string& pattern, int epoch, const Logs& logs);

// ---- EarlyStopping --------------------------------------------------------------------------
struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;  // an improvement must exceed this
  int patience = 0;        // epochs without improvement before stopping
  int verbose = 0;
  std::string mode = "auto";
  std::optional<double> baseline;
  bool restore_best_weights = false;  // on stopping, go back to the best epoch's weights
  int start_from_epoch = 0;
};
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  bool wants_batch_logs(bool, std::int64_t) const override { return false; }  // epochs only
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  int stopped_epoch() const { return stopped_epoch_; }  // 0: did not stop early
  int best_epoch() const { return best_epoch_; }
  double best() const { return best_; }

 private:
  bool improved(double value, double reference) const;
  EarlyStoppingOptions o_;
  bool maximise_ = false;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  double best_ = 0.0;
  std::map<std::string, Tensor> best_weights_;
};

// ---- CSVLogger ------------------------------------------------------------------------------
// One row per epoch: "epoch" then the log keys in sorted order (as Keras writes them).
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  bool wants_batch_logs(bool, std::int64_t) const override { return false; }  // epochs only
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  bool writes_files() const override { return true; }

 private:
  std::string filename_;
  char sep_;
  bool append_;
  std::shared_ptr<std::ofstream> file_;
  std::vector<std::string> keys_;
  bool header_written_ = false;
};

// ---- LearningRateScheduler ------------------------------------------------------------------
// Sets the optimiser's learning rate at each epoch's start to fn(epoch, current_lr).
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int, double)> schedule, int verbose = 0);
  bool wants_batch_logs(bool, std::int64_t) const override { return false; }  // epochs only
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  std::function<double(int, double)> fn_;
  int verbose_;
};

// ---- ReduceLROnPlateau ----------------------------------------------------------------------
// The rule lives in optim::ReduceLROnPlateau; this feeds it the monitored value once per epoch.
class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(optim::ReduceLROnPlateauOptions options = {}, int verbose = 0);
  bool wants_batch_logs(bool, std::int64_t) const override { return false; }  // epochs only
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  optim::ReduceLROnPlateau rule_;
  int verbose_;
};

// ---- TerminateOnNaN -------------------------------------------------------------------------
struct TerminateOnNaNOptions {
  // On stopping, put back the weights and the optimiser state of the end of the last epoch
  // whose training loss and weights were finite (kept in memory at each such epoch's end: a
  // copy of the weights). Nothing is restored when no epoch ended well (last_good_epoch() is
  // then -1). With this option, weights holding NaN or inf at an epoch's end (an update that
  // overflowed after a finite loss) also stop training.
  bool restore_last_good_weights = false;
  int verbose = 1;  // 1: print a line on stdout when stopping (and when restoring)
};
// Stops training after the first batch whose loss is NaN or infinite (Keras' TerminateOnNaN),
// saying so: "Epoch 2, batch 17: invalid loss (nan), terminating training".
class TerminateOnNaN : public Callback {
 public:
  explicit TerminateOnNaN(TerminateOnNaNOptions options = {}) : o_(options) {}
  void on_train_begin(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_train_batch_end(std::int64_t batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  bool terminated() const { return terminated_; }
  // Where it stopped: epoch (0-based, as fit() counts) and batch (0-based) of the bad loss;
  // batch -1 when non-finite weights stopped it at the epoch's end.
  int terminated_epoch() const { return terminated_epoch_; }
  std::int64_t terminated_batch() const { return terminated_batch_; }
  double invalid_loss() const { return invalid_loss_; }
  // The last epoch (0-based) that ended before the invalid loss; -1 when none. With
  // restore_last_good_weights, the last whose weights were also all finite: the model holds its
  // weights after fit().
  int last_good_epoch() const { return last_good_epoch_; }

 private:
  TerminateOnNaNOptions o_;
  bool terminated_ = false;
  int epoch_ = 0, terminated_epoch_ = -1, last_good_epoch_ = -1;
  std::int64_t terminated_batch_ = -1;
  double invalid_loss_ = 0.0;
  std::map<std::string, Tensor> good_weights_, good_optimizer_;
};

}  // namespace soma::callbacks
