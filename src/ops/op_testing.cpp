// The test-input preparers (soma/op_testing.hpp), keyed by op name.
#include "soma/op_testing.hpp"

#include <map>
#include <mutex>
#include <string>

#include "soma/op.hpp"

namespace soma {
namespace {
struct Preparers {
  std::mutex mu;
  std::map<std::string, PrepareTestInputsFn, std::less<>> fns;
};
Preparers& preparers() {
  static Preparers p;
  return p;
}
}  // namespace

void set_test_inputs_prepare(std::string_view op, PrepareTestInputsFn fn) {
  auto& p = preparers();
  std::lock_guard<std::mutex> lock(p.mu);
  p.fns[std::string(op)] = fn;
}

PrepareTestInputsFn test_inputs_prepare(std::string_view op) {
  get_op(op);  // fills the registry (whose ops register their preparers) on first use
  auto& p = preparers();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.fns.find(op);
  return it == p.fns.end() ? nullptr : it->second;
}

}  // namespace soma
