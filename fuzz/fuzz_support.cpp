// Shared fuzzing helpers (fuzz_target.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <typeinfo>

#include "fuzz_target.hpp"
#include "soma/error.hpp"
#include "soma/runtime_checks.hpp"
#include "soma/threading.hpp"

namespace soma::fuzz {

std::string memory_file(const std::uint8_t* data, std::size_t size, int slot) {
  static std::map<int, int> fds;
  int& fd = fds[slot];
  if (fd <= 0) {
    fd = ::memfd_create(("soma_fuzz_" + std::to_string(slot)).c_str(), 0);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
  }
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) {
    std::perror("memfd write");
    std::abort();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

void setup() {
  soma::set_num_threads(1);
  soma::set_max_allocation_bytes(kFuzzMaxAllocation);
}

int run_one(TargetFn fn, const std::uint8_t* data, std::size_t size, const char* target,
            std::string* message) {
  try {
    fn(data, size);
    return 0;
  } catch (const soma::Error& e) {
    if (message) *message = e.what();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: a %s escaped (not soma::Error): %s\n", target, typeid(e).name(),
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: an exception of unknown type escaped\n", target);
    std::abort();
  }
}

}  // namespace soma::fuzz
