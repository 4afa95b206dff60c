#pragma once
// The device an example runs on, shared by the examples that train:
//   --device DEV  (anywhere on the command line; removed from argv before the example parses it)
//   SOMA_DEVICE=DEV in the environment, when --device is not given
// DEV is cpu (default), cuda (the first GPU) or cuda:N. When a GPU was asked for and cannot be
// used, the example prints why and exits with status 77 (CTest's "skipped": the examples' CUDA
// tests pass SKIP_RETURN_CODE 77), so a machine without a GPU skips them instead of failing.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <soma/cuda.hpp>
#include <soma/soma.hpp>

namespace soma::examples {

inline constexpr int kExitSkipped = 77;

// Parses DEV; exits 2 on a malformed value and 77 when CUDA cannot give that device.
inline Device parse_example_device(const std::string& spec, const char* program) {
  Device d = Device::cpu();
  if (spec == "cpu") return d;
  if (spec == "cuda") {
    d = Device::cuda(0);
  } else if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 && spec.size() < 10 &&
             spec.find_first_not_of("0123456789", 5) == std::string::npos) {
    d = Device::cuda(std::atoi(spec.c_str() + 5));
  } else {
    std::fprintf(stderr, "%s: bad device '%s' (expected cpu, cuda or cuda:N)\n", program,
                 spec.c_str());
    std::exit(2);
  }
  if (!cuda::is_available() || d.index >= cuda::device_count()) {
    std::fprintf(stderr, "%s: skipped: %s was asked for but cannot be used: %s\n", program,
                 d.str().c_str(),
                 cuda::is_available()
                     ? ("only " + std::to_string(cuda::device_count()) + " CUDA device(s)").c_str()
                     : cuda::unavailable_reason().c_str());
    std::exit(kExitSkipped);
  }
  return d;
}

// Takes --device DEV / --device=DEV out of argv (argc shrinks), else reads SOMA_DEVICE.
inline Device device_from_args(int& argc, char** argv) {
  std::string spec;
  bool given = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      spec = argv[++i];
      given = true;
    } else if (std::strncmp(argv[i], "--device=", 9) == 0) {
      spec = argv[i] + 9;
      given = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  if (!given) {
    const char* env = std::getenv("SOMA_DEVICE");
    spec = env && *env ? env : "cpu";
  }
  const char* slash = std::strrchr(argv[0], '/');
  const Device d = parse_example_device(spec, slash ? slash + 1 : argv[0]);
  if (!d.is_cpu()) std::printf("device: %s\n", d.str().c_str());
  return d;
}

// A tensor's values in host memory (to read them with item/to_vector after a device run).
inline Tensor host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

}  // namespace soma::examples
