#pragma once
// Logs (metric name -> value, as handed to callbacks) and History (per-epoch logs, returned by
// Model::fit), as in Keras.
#include <map>
#include <string>
#include <vector>

namespace soma::model {

using Logs = std::map<std::string, double>;

struct History {
  std::vector<int> epoch;                                // epoch indices run (0-based)
  std::map<std::string, std::vector<double>> history;    // "loss", "accuracy", "val_loss", ...

  // The values of one metric, one per epoch; unknown names throw soma::Error listing the keys.
  const std::vector<double>& operator[](const std::string& key) const;
  bool contains(const std::string& key) const { return history.count(key) != 0; }
  std::vector<std::string> keys() const;
  std::size_t size() const { return epoch.size(); }  // epochs run
  void append(int epoch_index, const Logs& logs);
};

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::Logs;
using model::History;
}  // namespace soma::nn
