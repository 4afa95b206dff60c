#pragma once
// The order in which a functional model lists its nodes: depth first from an output, each node
// after its inputs. Model's constructor and the functional model file both use it, so "call k of
// a shared layer" means the same call on both sides of a save.
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "soma/model/functional.hpp"

namespace soma::model::detail {

// Appends to `order` every node reachable from `root` not yet in `seen`, inputs first. Iterative:
// a chain of layers read from a file may be arbitrarily long.
inline void topo_visit(const std::shared_ptr<SymbolicNode>& root,
                       std::unordered_set<const SymbolicNode*>& seen,
                       std::vector<std::shared_ptr<SymbolicNode>>& order) {
  using NodePtr = std::shared_ptr<SymbolicNode>;
  if (!seen.insert(root.get()).second) return;
  std::vector<std::pair<const NodePtr*, std::size_t>> stack{{&root, 0}};
  while (!stack.empty()) {
    const NodePtr& n = *stack.back().first;
    std::size_t& next = stack.back().second;
    if (next < n->inputs.size()) {
      const NodePtr& in = n->inputs[next++].node();
      if (seen.insert(in.get()).second) stack.push_back({&in, 0});
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
}

}  // namespace soma::model::detail
