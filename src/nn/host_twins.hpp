#pragma once
// Internal: host copies of batches that were copied to a device. Model::fit gathers each batch on
// the host and copies it to the model's device; while a HostTwinScope is open, a check that needs
// the values (a sparse loss's label range, losses.cpp) reads the host copy instead of copying the
// device tensor back, which would wait for the device in every step.
#include <vector>

#include "soma/tensor.hpp"

namespace soma::detail {

class HostTwinScope {
 public:
  // device[i] holds the same values as host[i] (a CPU tensor); undefined entries are skipped.
  HostTwinScope(const std::vector<Tensor>& device, const std::vector<Tensor>& host);
  ~HostTwinScope();
  HostTwinScope(const HostTwinScope&) = delete;
  HostTwinScope& operator=(const HostTwinScope&) = delete;

 private:
  std::size_t added_ = 0;
};

// The host copy of `t`'s values, in t's shape, when a HostTwinScope knows t's storage (t itself,
// or a reshape of it); else an undefined Tensor.
Tensor host_twin(const Tensor& t);

}  // namespace soma::detail
