#include "soma/model/history.hpp"

#include "soma/error.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

const std::vector<double>& History::operator[](const std::string& key) const {
  auto it = history.find(key);
  if (it == history.end()) {
    std::string known;
    for (auto& [k, v] : history) known += (known.empty() ? "" : ", ") + k;
    fail("History", "no metric '", key, "'; recorded: ", known.empty() ? "(none)" : known);
  }
  return it->second;
}

std::vector<std::string> History::keys() const {
  std::vector<std::string> out;
  for (auto& [k, v] : history) out.push_back(k);
  return out;
}

void History::append(int epoch_index, const Logs& logs) {
  epoch.push_back(epoch_index);
  for (auto& [k, v] : logs) history[k].push_back(v);
}

}  // namespace soma::model
