#include "soma/model/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string_view>

namespace soma::callbacks {

bool stdout_is_terminal() { return ::isatty(::fileno(stdout)) != 0; }

namespace {
std::string format_value(double v) {
  char buf[64];
  if (std::isfinite(v) && (std::abs(v) > 1e-3 || v == 0.0))
    std::snprintf(buf, sizeof buf, "%.4f", v);
  else
    std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

// Keras' "2s", "1ms/step" style.
std::string format_per_step(double seconds) {
  char buf[64];
  if (seconds >= 1) std::snprintf(buf, sizeof buf, "%.0fs/step", seconds);
  else if (seconds >= 1e-3) std::snprintf(buf, sizeof buf, "%.0fms/step", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%.0fus/step", seconds * 1e6);
  return buf;
}

std::string format_eta(double seconds) {
  char buf[64];
  auto s = std::int64_t(seconds);
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600),
                               (long long)(s % 3600 / 60), (long long)(s % 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  return buf;
}
}  // namespace

ProgressBar::ProgressBar(std::ostream& os, bool is_terminal, int verbose)
    : os_(os), terminal_(is_terminal), verbose_(verbose) {}

// The elapsed time of a finished epoch: whole seconds from 1 s on, milliseconds below (a 0.5 s
// epoch reads "500ms", not "0s").
std::string ProgressBar::format_elapsed(double seconds) {
  char buf[64];
  if (seconds >= 1) std::snprintf(buf, sizeof buf, "%.0fs", std::floor(seconds));
  else std::snprintf(buf, sizeof buf, "%.0fms", std::floor(seconds * 1e3));
  return buf;
}

std::string ProgressBar::format_logs(const nn::Logs& logs) {
  // Keras' order: training values, then validation ones ("val_..."); in each, the loss first,
  // then the metrics by name.
  auto group = [](const std::string& k) {
    const bool val = k.rfind("val_", 0) == 0;
    const std::string_view base = std::string_view(k).substr(val ? 4 : 0);
    return 2 * int(val) + int(base != "loss");
  };
  std::vector<std::pair<std::string, double>> order(logs.begin(), logs.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return group(a.first) < group(b.first); });
  std::string out;
  for (auto& [k, v] : order) out += (out.empty() ? "" : " - ") + k + ": " + format_value(v);
  return out;
}

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::start(std::string title, std::int64_t target) {
  title_ = std::move(title);
  target_ = target;
  start_ = last_draw_ = std::chrono::steady_clock::now();
  last_width_ = 0;
  drawn_ = false;
  if (verbose_ == 1 && terminal_ && !title_.empty()) os_ << title_ << "\n" << std::flush;
}

std::string ProgressBar::bar_line(std::int64_t step, const nn::Logs& logs, bool final) const {
  std::ostringstream os;
  const double t = elapsed();
  const std::string target = std::to_string(target_);
  std::string count = std::to_string(step);
  if (count.size() < target.size()) count.insert(0, target.size() - count.size(), ' ');
  if (verbose_ == 2) {
    os << format_elapsed(t) << " - " << format_per_step(step ? t / double(step) : 0.0);
  } else {
    constexpr int width = 30;
    int filled = target_ > 0 ? int(double(width) * double(step) / double(target_)) : width;
    if (filled > width) filled = width;
    std::string bar(std::size_t(filled), '=');
    if (filled > 0 && step < target_) bar.back() = '>';
    bar.append(std::size_t(width - filled), '.');
    os << count << "/" << target << " [" << bar << "] - ";
    if (final)
      os << format_elapsed(t) << " " << format_per_step(step ? t / double(step) : 0.0);
    else
      os << "ETA: " << format_eta(step ? t / double(step) * double(target_ - step) : 0.0);
  }
  std::string metrics = format_logs(logs);
  if (!metrics.empty()) os << " - " << metrics;
  return os.str();
}

void ProgressBar::draw(const std::string& line) {
  // Pad with spaces rather than an escape sequence, so a shorter line clears the old one.
  std::string padded = line;
  if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
  os_ << '\r' << padded << std::flush;
  last_width_ = line.size();
  drawn_ = true;
}

bool ProgressBar::wants_update(std::int64_t step) const {
  if (verbose_ != 1 || !terminal_) return false;  // files and pipes get the final line only
  if (step >= target_) return false;               // finish() draws the last state
  return !drawn_ || std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(50);
}

void ProgressBar::update(std::int64_t step, const nn::Logs& logs) {
  if (verbose_ != 1 || !terminal_) return;  // files and pipes get the final line only
  if (step >= target_) return;               // finish() draws the last state
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
  last_draw_ = now;
  draw(bar_line(step, logs, false));
}

void ProgressBar::finish(std::int64_t step, const nn::Logs& logs) {
  if (verbose_ <= 0) return;
  std::string line = bar_line(step, logs, true);
  if (verbose_ == 1 && terminal_) {
    draw(line);
    os_ << "\n" << std::flush;
    return;
  }
  if (!title_.empty()) line = title_ + " - " + line;
  os_ << line << "\n" << std::flush;
}

ProgbarLogger::ProgbarLogger(std::ostream& os, bool is_terminal, int verbose)
    : bar_(os, is_terminal, verbose) {}

void ProgbarLogger::on_epoch_begin(int epoch, Logs&) {
  steps_done_ = 0;
  bar_.start("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(params().epochs),
             params().steps);
}

void ProgbarLogger::batch_done(std::int64_t batch, const Logs& logs) {
  steps_done_ = batch + 1;
  if (!declined_) bar_.update(steps_done_, logs);
  declined_ = false;
}

void ProgbarLogger::on_train_batch_end(std::int64_t batch, Logs& logs) { batch_done(batch, logs); }

void ProgbarLogger::on_epoch_end(int, Logs& logs) { bar_.finish(steps_done_, logs); }

void ProgbarLogger::on_test_begin(Logs&) {
  steps_done_ = 0;
  bar_.start("", test_steps_);
}
void ProgbarLogger::on_test_batch_end(std::int64_t batch, Logs& logs) { batch_done(batch, logs); }
void ProgbarLogger::on_test_end(Logs& logs) { bar_.finish(steps_done_, logs); }

void ProgbarLogger::on_predict_begin(Logs&) {
  steps_done_ = 0;
  bar_.start("", test_steps_);
}
void ProgbarLogger::on_predict_batch_end(std::int64_t batch, Logs& logs) {
  steps_done_ = batch + 1;
  bar_.update(steps_done_, logs);
}
void ProgbarLogger::on_predict_end(Logs& logs) { bar_.finish(steps_done_, logs); }

}  // namespace soma::callbacks
