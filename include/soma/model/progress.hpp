#pragma once
// Keras' progress bar:
//   Epoch 1/5
//   1875/1875 [==============================] - 2s 1ms/step - loss: 0.2982 - accuracy: 0.9127
// On a terminal the bar is redrawn in place with a carriage return (at most every 50 ms). Anywhere else (a
// file, a pipe) each epoch gives exactly one line and no control characters:
//   Epoch 1/5 - 1875/1875 [==============================] - 2s 1ms/step - loss: 0.2982 - ...
// verbose=2 gives one short line per epoch: "Epoch 1/5 - 2s - 1ms/step - loss: 0.2982 - ...".
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "soma/model/callbacks.hpp"
#include "soma/model/history.hpp"

namespace soma::callbacks {

// True when stdout is a terminal.
bool stdout_is_terminal();

class ProgressBar {
 public:
  ProgressBar(std::ostream& os, bool is_terminal, int verbose = 1);
  // Starts a run of `target` steps; `title` ("Epoch 1/5") may be empty.
  void start(std::string title, std::int64_t target);
  // `step` steps are done; logs are the running values. Throttled on a terminal.
  void update(std::int64_t step, const nn::Logs& logs);
  // Whether update(step, ...) would draw (a terminal bar at its refresh interval).
  bool wants_update(std::int64_t step) const;
  // The run is over: prints the final line (with validation values, if any, in logs).
  void finish(std::int64_t step, const nn::Logs& logs);

  // "loss: 0.2982 - accuracy: 0.9127": loss first, then other keys, then val_ keys.
  static std::string format_logs(const nn::Logs& logs);
  // A finished epoch's time: "3s" from one second on, "500ms" below, as Keras shows it.
  static std::string format_elapsed(double seconds);

 private:
  std::string bar_line(std::int64_t step, const nn::Logs& logs, bool final) const;
  void draw(const std::string& line);
  double elapsed() const;

  std::ostream& os_;
  bool terminal_;
  int verbose_;
  std::string title_;
  std::int64_t target_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::size_t last_width_ = 0;
  bool drawn_ = false;
};

// The callback fit() and evaluate() add when verbose > 0.
class ProgbarLogger : public Callback {
 public:
  ProgbarLogger(std::ostream& os, bool is_terminal, int verbose);
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_train_batch_end(std::int64_t batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  // Standalone evaluate()/predict(): a bar without an epoch title.
  void on_test_begin(Logs& logs) override;
  void on_test_batch_end(std::int64_t batch, Logs& logs) override;
  void on_test_end(Logs& logs) override;
  void on_predict_begin(Logs& logs) override;
  void on_predict_batch_end(std::int64_t batch, Logs& logs) override;
  void on_predict_end(Logs& logs) override;
  void set_test_steps(std::int64_t steps) { test_steps_ = steps; }
  // Batch logs only when the bar is redrawn (verbose=1 on a terminal, every 50 ms). A batch
  // whose logs were declined is not drawn (it would show empty logs).
  bool wants_batch_logs(bool training, std::int64_t batch) const override {
    (void)training;
    declined_ = !bar_.wants_update(batch + 1);
    return !declined_;
  }

 private:
  void batch_done(std::int64_t batch, const Logs& logs);

  ProgressBar bar_;
  std::int64_t steps_done_ = 0, test_steps_ = 0;
  mutable bool declined_ = false;
};

}  // namespace soma::callbacks
