#include "soma/model/callbacks.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>

#include "soma/error.hpp"
#include "soma/model/model.hpp"
#include "soma/model/serialization.hpp"

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
  if (mode == "min") return false;
  if (mode == "max") return true;
  if (mode != "auto") fail(who, "mode must be \"auto\", \"min\" or \"max\", got \"", mode, "\"");
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
  best_ = maximise_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
}

void ModelCheckpoint::on_epoch_end(int epoch, Logs& logs) {
  const std::string path = format_filepath(filepath_, epoch, logs);
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

void CSVLogger::on_train_begin(Logs&) {
  // Appending to a file that already has rows: its header is already there.
  bool has_content = append_ && std::filesystem::exists(filename_) &&
                     std::filesystem::file_size(filename_) > 0;
  file_ = std::make_shared<std::ofstream>(
      filename_, append_ ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
  if (!*file_) fail("CSVLogger", "cannot open '", filename_, "' for writing");
  header_written_ = has_content;
  keys_.clear();
}

void CSVLogger::on_epoch_end(int epoch, Logs& logs) {
  if (!file_) return;
  if (keys_.empty())
    for (auto& [k, v] : logs) keys_.push_back(k);
  if (!header_written_) {
    *file_ << "epoch";
    for (auto& k : keys_) *file_ << sep_ << k;
    *file_ << "\n";
    header_written_ = true;
  }
  *file_ << epoch;
  for (auto& k : keys_) {
    *file_ << sep_;
    auto it = logs.find(k);
    if (it == logs.end()) continue;  // empty field, as Keras writes "NA"-less gaps
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, it->second);  // shortest round-trip
    file_->write(buf, end - buf);
  }
  *file_ << "\n" << std::flush;
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
void TerminateOnNaN::on_train_batch_end(std::int64_t batch, Logs& logs) {
  auto it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  std::cout << "Batch " << batch << ": Invalid loss, terminating training\n";
  terminated_ = true;
  model().stop_training = true;
}

}  // namespace soma::callbacks
