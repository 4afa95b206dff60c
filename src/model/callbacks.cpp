#include "soma/model/callbacks.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "internal/atomic_file.hpp"
#include "internal/monitor_mode.hpp"
#include "soma/error.hpp"
#include "soma/model/model.hpp"
#include "soma/model/serialization.hpp"
#include "soma/model/weight_checks.hpp"

namespace soma::callbacks {

nn::Model& Callback::model() const {
  if (!model_) fail("Callback", "no model set; callbacks receive their model from fit()");
  return *model_;
}

// ---- CallbackList ---------------------------------------------------------------------------
namespace {
// A LambdaCallback as a Callback: each hook calls the matching function when it is set.
class LambdaAdapter : public Callback {
 public:
  explicit LambdaAdapter(std::shared_ptr<LambdaCallback> f) : f_(std::move(f)) {}
  void on_train_begin(Logs& l) override { if (f_->on_train_begin_fn) f_->on_train_begin_fn(l); }
  void on_train_end(Logs& l) override { if (f_->on_train_end_fn) f_->on_train_end_fn(l); }
  void on_epoch_begin(int e, Logs& l) override {
    if (f_->on_epoch_begin_fn) f_->on_epoch_begin_fn(e, l);
  }
  void on_epoch_end(int e, Logs& l) override { if (f_->on_epoch_end_fn) f_->on_epoch_end_fn(e, l); }
  void on_train_batch_begin(std::int64_t b, Logs& l) override {
    if (f_->on_train_batch_begin_fn) f_->on_train_batch_begin_fn(b, l);
  }
  void on_train_batch_end(std::int64_t b, Logs& l) override {
    if (f_->on_train_batch_end_fn) f_->on_train_batch_end_fn(b, l);
  }
  void on_test_begin(Logs& l) override { if (f_->on_test_begin_fn) f_->on_test_begin_fn(l); }
  void on_test_end(Logs& l) override { if (f_->on_test_end_fn) f_->on_test_end_fn(l); }
  void on_test_batch_begin(std::int64_t b, Logs& l) override {
    if (f_->on_test_batch_begin_fn) f_->on_test_batch_begin_fn(b, l);
  }
  void on_test_batch_end(std::int64_t b, Logs& l) override {
    if (f_->on_test_batch_end_fn) f_->on_test_batch_end_fn(b, l);
  }
  bool wants_batch_logs(bool training, std::int64_t) const override {
    return training ? bool(f_->on_train_batch_end_fn) : bool(f_->on_test_batch_end_fn);
  }

 private:
  std::shared_ptr<LambdaCallback> f_;
};
}  // namespace

std::shared_ptr<Callback> ref_adapt(std::shared_ptr<LambdaCallback> fns) {
  if (!fns) return nullptr;
  return std::make_shared<LambdaAdapter>(std::move(fns));
}

void CallbackList::set_model(nn::Model* m) {
  for (auto& c : cbs_) c->set_model(m);
}
void CallbackList::set_params(const TrainParams& p) {
  for (auto& c : cbs_) c->set_params(p);
}
bool CallbackList::wants_batch_logs(bool training, std::int64_t batch) const {
  for (auto& c : cbs_)
    if (c->wants_batch_logs(training, batch)) return true;
  return false;
}
#define SOMA_FORWARD0(hook) \
  void CallbackList::hook(Logs& logs) { for (auto& c : cbs_) c->hook(logs); }
#define SOMA_FORWARD1(hook, T) \
  void CallbackList::hook(T i, Logs& logs) { for (auto& c : cbs_) c->hook(i, logs); }
SOMA_FORWARD0(on_train_begin)
SOMA_FORWARD0(on_train_end)
SOMA_FORWARD1(on_epoch_begin, int)
SOMA_FORWARD1(on_epoch_end, int)
SOMA_FORWARD1(on_train_batch_begin, std::int64_t)
SOMA_FORWARD1(on_train_batch_end, std::int64_t)
SOMA_FORWARD0(on_test_begin)
SOMA_FORWARD0(on_test_end)
SOMA_FORWARD1(on_test_batch_begin, std::int64_t)
SOMA_FORWARD1(on_test_batch_end, std::int64_t)
SOMA_FORWARD0(on_predict_begin)
SOMA_FORWARD0(on_predict_end)
SOMA_FORWARD1(on_predict_batch_begin, std::int64_t)
SOMA_FORWARD1(on_predict_batch_end, std::int64_t)
#undef SOMA_FORWARD0
#undef SOMA_FORWARD1

bool monitor_maximises(const std::string& monitor, const std::string& mode, const char* who) {
  const detail::MonitorMode m = detail::parse_monitor_mode(mode, who);
  if (m != detail::MonitorMode::Auto) return m == detail::MonitorMode::Max;
  for (const char* k : {"acc", "auc", "precision", "recall", "f1"})
    if (monitor.find(k) != std::string::npos) return true;
  return false;
}

namespace {
// The monitored value, or nullopt (with a warning, as Keras does) when logs lack it.
std::optional<double> monitored(const Logs& logs, const std::string& key, const char* who) {
  auto it = logs.find(key);
  if (it != logs.end()) return it->second;
  std::string known;
  for (auto& [k, v] : logs) known += (known.empty() ? "" : ", ") + k;
  std::cerr << who << ": monitored metric '" << key << "' is not in the logs (available: "
            << known << "); skipping\n";
  return std::nullopt;
}
}  // namespace

// ---- ModelCheckpoint ------------------------------------------------------------------------
std::string format_filepath(const std::string& pattern, int epoch, const Logs& logs) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '{') {  // "{{" is a literal brace
      out += '{';
      ++i;
      continue;
    }
    auto close = pattern.find('}', i);
    if (close == std::string::npos)
      fail("ModelCheckpoint", "unclosed '{' in filepath \"", pattern, "\"");
    std::string field = pattern.substr(i + 1, close - i - 1);
    std::string key = field, spec;
    if (auto colon = field.find(':'); colon != std::string::npos) {
      key = field.substr(0, colon);
      spec = field.substr(colon + 1);
    }
    double value;
    bool integer = false;
    if (key == "epoch") {
      value = epoch + 1;  // Keras numbers files from 1
      integer = true;
    } else {
      auto it = logs.find(key);
      if (it == logs.end())
        fail("ModelCheckpoint", "filepath \"", pattern, "\" names '", key,
             "', which is not in the logs");
      value = it->second;
    }
    char buf[128];
    if (spec.empty()) {
      if (integer) std::snprintf(buf, sizeof buf, "%lld", (long long)value);
      else std::snprintf(buf, sizeof buf, "%g", value);
    } else {
      // Python format specs map onto printf: "02d", ".4f", "e".
      char type = spec.back();
      std::string fmt = "%" + spec;
      if (type == 'd') {
        fmt.insert(fmt.size() - 1, "ll");
        std::snprintf(buf, sizeof buf, fmt.c_str(), (long long)value);
      } else if (type == 'f' || type == 'e' || type == 'g' || type == 'E' || type == 'G') {
        std::snprintf(buf, sizeof buf, fmt.c_str(), value);
      } else {
        fail("ModelCheckpoint", "unsupported format spec '", spec, "' in \"", pattern, "\"");
      }
    }
    out += buf;
    i = close;
  }
  return out;
}

ModelCheckpoint::ModelCheckpoint(std::string filepath, ModelCheckpointOptions options)
    : filepath_(std::move(filepath)), o_(std::move(options)) {
  if (filepath_.empty()) fail("ModelCheckpoint", "filepath must not be empty");
  maximise_ = monitor_maximises(o_.monitor, o_.mode, "ModelCheckpoint");
}

void ModelCheckpoint::on_train_begin(Logs&) {
  // A directory that is missing or not writable fails now, not after the first epoch. (A
  // directory part with "{...}" fields is only known at the epoch's end.)
  const auto slash = filepath_.find_last_of('/');
  if (slash == std::string::npos || filepath_.find('{') > slash) {
    const std::string why = soma::internal::check_writable_location(filepath_);
    if (!why.empty()) fail("ModelCheckpoint", "cannot save to '", filepath_, "': ", why);
  }
  best_ = maximise_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
}

void ModelCheckpoint::on_epoch_end(int epoch, Logs& logs) {
  const std::string path = format_filepath(filepath_, epoch, logs);
  // A diverged epoch (NaN/inf loss or weights) never replaces a good checkpoint (issue 19).
  const auto loss = logs.find("loss");
  const bool bad_loss = loss != logs.end() && !std::isfinite(loss->second);
  const auto problems = bad_loss ? std::vector<WeightProblem>{} : check_weights(model());
  if (bad_loss || !problems.empty()) {
    std::cerr << "ModelCheckpoint: epoch " << epoch + 1 << ": not saving to " << path << ": "
              << (bad_loss ? "the loss is " + std::to_string(loss->second)
                           : "the weights hold NaN or infinite values (" + problems[0].message + ")")
              << "; the last checkpoint saved is kept\n";
    return;
  }
  if (o_.save_best_only) {
    auto v = monitored(logs, o_.monitor, "ModelCheckpoint");
    if (!v) return;
    bool better = maximise_ ? *v > best_ : *v < best_;
    if (!better) {
      if (o_.verbose > 0)
        std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " did not improve from "
                  << best_ << "\n";
      return;
    }
    if (o_.verbose > 0)
      std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " improved from " << best_
                << " to " << *v << ", saving model to " << path << "\n";
    best_ = *v;
  } else if (o_.verbose > 0) {
    std::cout << "\nEpoch " << epoch + 1 << ": saving model to " << path << "\n";
  }
  if (o_.save_weights_only) model().save_weights(path);
  else  // whole model, optimiser state, epoch and RNG state: load_checkpoint resumes exactly
    save_checkpoint(model(), path, {.epoch = epoch + 1, .rng = get_rng_state()});
  saved_.push_back(path);
}

// ---- EarlyStopping --------------------------------------------------------------------------
EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : o_(std::move(options)) {
  if (o_.patience < 0) fail("EarlyStopping", "patience must be >= 0, got ", o_.patience);
  maximise_ = monitor_maximises(o_.monitor, o_.mode, "EarlyStopping");
  o_.min_delta = std::abs(o_.min_delta);
}

bool EarlyStopping::improved(double value, double reference) const {
  if (std::isnan(value)) return false;
  return maximise_ ? value - o_.min_delta > reference : value + o_.min_delta < reference;
}

void EarlyStopping::on_train_begin(Logs&) {
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_ = maximise_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, Logs& logs) {
  auto v = monitored(logs, o_.monitor, "EarlyStopping");
  if (!v || epoch < o_.start_from_epoch) return;
  if (o_.restore_best_weights && best_weights_.empty()) best_weights_ = model().get_weights();
  ++wait_;
  if (improved(*v, best_)) {
    best_ = *v;
    best_epoch_ = epoch;
    if (o_.restore_best_weights) best_weights_ = model().get_weights();
    // With a baseline, only improving on the baseline restarts the wait.
    if (!o_.baseline || improved(*v, *o_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= o_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model().stop_training = true;
    if (o_.restore_best_weights && !best_weights_.empty()) {
      if (o_.verbose > 0)
        std::cout << "Restoring model weights from the end of the best epoch: "
                  << best_epoch_ + 1 << ".\n";
      model().set_weights(best_weights_);
    }
  }
}

void EarlyStopping::on_train_end(Logs&) {
  if (stopped_epoch_ > 0 && o_.verbose > 0)
    std::cout << "Epoch " << stopped_epoch_ + 1 << ": early stopping\n";
}

// ---- CSVLogger ------------------------------------------------------------------------------
CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), sep_(separator), append_(append) {
  if (filename_.empty()) fail("CSVLogger", "filename must not be empty");
}

// The file is small, and rewritten whole at each epoch's end through the atomic write
// (internal/atomic_file.hpp): a full disk or a kill leaves the rows of the epochs before, never a
// torn row or an empty file, and a failure throws at once naming the file. The file on disk is
// the state between epochs; file_ (never opened) only marks a run in progress.
namespace {
std::string read_text(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) return {};
  std::ostringstream ss;
  ss << is.rdbuf();
  return ss.str();
}
}  // namespace

void CSVLogger::on_train_begin(Logs&) {
  // Written now (empty, or as it is when appending) so a bad location fails before the first
  // epoch. Appending to a file that already has rows: its header is already there.
  std::string text = append_ ? read_text(filename_) : std::string();
  soma::internal::write_file_atomically(filename_, text, "CSVLogger");
  file_ = std::make_shared<std::ofstream>();
  header_written_ = !text.empty();
  keys_.clear();
}

void CSVLogger::on_epoch_end(int epoch, Logs& logs) {
  if (!file_) return;
  if (keys_.empty())
    for (auto& [k, v] : logs) keys_.push_back(k);
  std::string text = read_text(filename_);
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (!header_written_ || text.empty()) {
    text += "epoch";
    for (auto& k : keys_) (text += sep_) += k;
    text += '\n';
  }
  text += std::to_string(epoch);
  for (auto& k : keys_) {
    text += sep_;
    auto it = logs.find(k);
    if (it == logs.end()) continue;  // empty field, as Keras writes "NA"-less gaps
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, it->second);  // shortest round-trip
    text.append(buf, end);
  }
  text += '\n';
  soma::internal::write_file_atomically(filename_, text, "CSVLogger");
  header_written_ = true;
}

void CSVLogger::on_train_end(Logs&) { file_.reset(); }

// ---- LearningRateScheduler ------------------------------------------------------------------
LearningRateScheduler::LearningRateScheduler(std::function<double(int, double)> schedule,
                                             int verbose)
    : fn_(std::move(schedule)), verbose_(verbose) {
  if (!fn_) fail("LearningRateScheduler", "the schedule function is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, Logs&) {
  auto& opt = model().optimizer();
  double lr = fn_(epoch, opt.learning_rate());
  if (!std::isfinite(lr))
    fail("LearningRateScheduler", "the schedule returned ", lr, " for epoch ", epoch);
  opt.set_learning_rate(lr);
  if (verbose_ > 0)
    std::cout << "\nEpoch " << epoch + 1 << ": LearningRateScheduler setting learning rate to "
              << lr << ".\n";
}

void LearningRateScheduler::on_epoch_end(int, Logs& logs) {
  logs["learning_rate"] = model().optimizer().learning_rate();
}

// ---- ReduceLROnPlateau ----------------------------------------------------------------------
ReduceLROnPlateau::ReduceLROnPlateau(optim::ReduceLROnPlateauOptions options, int verbose)
    : rule_(std::move(options)), verbose_(verbose) {}

void ReduceLROnPlateau::on_train_begin(Logs&) { rule_.reset(); }

void ReduceLROnPlateau::on_epoch_end(int epoch, Logs& logs) {
  auto& opt = model().optimizer();
  logs["learning_rate"] = opt.learning_rate();
  auto v = monitored(logs, rule_.options().monitor, "ReduceLROnPlateau");
  if (!v) return;
  double lr = rule_.step(*v, opt.learning_rate());
  if (rule_.reduced()) {
    opt.set_learning_rate(lr);
    if (verbose_ > 0)
      std::cout << "\nEpoch " << epoch + 1 << ": ReduceLROnPlateau reducing learning rate to "
                << lr << ".\n";
  }
}

// ---- TerminateOnNaN -------------------------------------------------------------------------
namespace {
bool finite_values(const std::map<std::string, Tensor>& state) {
  for (const auto& [k, t] : state) {
    if (!is_floating(t.dtype())) continue;
    for (double v : t.cast(DType::f64).to_vector<double>())
      if (!std::isfinite(v)) return false;
  }
  return true;
}
}  // namespace

void TerminateOnNaN::on_train_begin(Logs&) {
  terminated_ = false;
  terminated_epoch_ = last_good_epoch_ = -1;
  terminated_batch_ = -1;
  good_weights_.clear();
  good_optimizer_.clear();
}

void TerminateOnNaN::on_epoch_begin(int epoch, Logs&) { epoch_ = epoch; }

void TerminateOnNaN::on_train_batch_end(std::int64_t batch, Logs& logs) {
  auto it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  if (o_.verbose > 0)
    std::cout << "\nEpoch " << epoch_ + 1 << ", batch " << batch + 1 << ": invalid loss ("
              << (std::isnan(it->second) ? "nan" : it->second > 0 ? "inf" : "-inf")
              << "), terminating training" << std::endl;
  terminated_ = true;
  terminated_epoch_ = epoch_;
  terminated_batch_ = batch;
  invalid_loss_ = it->second;
  model().stop_training = true;
}

void TerminateOnNaN::on_epoch_end(int epoch, Logs& logs) {
  if (terminated_ || !o_.restore_last_good_weights) {
    if (!terminated_) last_good_epoch_ = epoch;
    return;
  }
  auto it = logs.find("loss");
  if (it != logs.end() && !std::isfinite(it->second)) return;
  nn::Model& m = model();
  std::map<std::string, Tensor> weights = m.get_weights();  // copies
  if (!finite_values(weights)) {  // a finite loss, but an update overflowed: as bad as a NaN loss
    if (o_.verbose > 0)
      std::cout << "\nEpoch " << epoch + 1
                << ": the weights hold NaN or infinite values, terminating training" << std::endl;
    terminated_ = true;
    terminated_epoch_ = epoch;
    terminated_batch_ = -1;
    invalid_loss_ = it != logs.end() ? it->second : 0.0;
    m.stop_training = true;
    return;
  }
  good_weights_ = std::move(weights);
  good_optimizer_ = m.compiled() ? m.optimizer().state_dict(m.trainable_parameters())
                                 : std::map<std::string, Tensor>{};
  last_good_epoch_ = epoch;
}

void TerminateOnNaN::on_train_end(Logs&) {
  if (!terminated_ || !o_.restore_last_good_weights) return;
  if (good_weights_.empty()) {
    if (o_.verbose > 0)
      std::cout << "TerminateOnNaN: no epoch ended with a finite loss; the weights are left as "
                   "they are"
                << std::endl;
    return;
  }
  nn::Model& m = model();
  m.set_weights(good_weights_);
  if (m.compiled() && !good_optimizer_.empty())
    m.optimizer().load_state_dict(good_optimizer_, m.trainable_parameters());
  if (o_.verbose > 0)
    std::cout << "TerminateOnNaN: restored the weights of epoch " << last_good_epoch_ + 1
              << ", the last with a finite loss" << std::endl;
}

}  // namespace soma::callbacks
