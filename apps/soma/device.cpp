// soma info, and the --device option of train/eval/predict: which devices this soma can use.
#include <cstdio>
#include <iostream>

#include <soma/cpu_isa.hpp>
#include <soma/cuda.hpp>

#include "common.hpp"

namespace soma::detail {
std::string memory_size_str(std::size_t n);  // libsoma's "5.1 GiB"
}

#ifndef SOMA_CLI_VERSION
#define SOMA_CLI_VERSION "0.0.0"
#endif

namespace soma::cli {

const char* const kDeviceHelp =
    "where the model runs: cpu (default), cuda (the first GPU) or cuda:N; the data stays\n"
    "in host memory and goes to the device batch by batch (soma info lists the GPUs)";

std::optional<Device> parse_device(const std::string& spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "cuda" || spec == "gpu") return Device::cuda(0);
  for (const char* prefix : {"cuda:", "gpu:"}) {
    const std::string p = prefix;
    if (spec.rfind(p, 0) != 0) continue;
    const std::string n = spec.substr(p.size());
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return Device::cuda(std::stoi(n));
  }
  return std::nullopt;
}

Device device_option(const Args& a) {
  const std::string spec = a.str("device", "cpu");
  const std::optional<Device> d = parse_device(spec);
  if (!d)
    throw UsageError("bad value for --device: '" + spec + "' (expected cpu, cuda or cuda:N)");
  if (d->is_cpu()) return *d;
  // Checked before the data is loaded: a run that cannot use the device fails at once.
  if (!cuda::is_built())
    throw NotAvailable("--device " + spec + ": this soma was built without CUDA (" +
                       cuda::unavailable_reason() + ")");
  if (!cuda::is_available())
    throw Error("--device " + spec + ": CUDA is not available: " + cuda::unavailable_reason());
  if (d->index >= cuda::device_count())
    throw Error("--device " + spec + ": there is no " + d->str() + " (" +
                std::to_string(cuda::device_count()) + " CUDA device" +
                (cuda::device_count() == 1 ? "" : "s") + " found: cuda:0" +
                (cuda::device_count() > 1
                     ? "..cuda:" + std::to_string(cuda::device_count() - 1)
                     : std::string()) +
                ")");
  return *d;
}

void move_model(nn::Module& model, Device device) {
  if (!device.is_cpu()) model.to(device);
}

Tensor to_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

const char* const kPrecisionHelp =
    "f32 (full f32 products), tf32 (f32 with TF32 tensor-core products on a GPU that has them),\n"
    "bf16 or f16 (autocast: matrix and convolution work in that dtype, f32 master weights; f16\n"
    "adds dynamic loss scaling). Default: f32 storage with TF32 unless SOMA_ALLOW_TF32=0";

std::string precision_option(const Args& a) {
  if (!a.has("precision")) return "";
  const std::string p = a.str("precision");
  if (p == "f32" || p == "tf32") {
    cuda::set_allow_tf32(p == "tf32");
    return "";
  }
  if (p == "bf16" || p == "f16") return p;
  throw UsageError("bad value for --precision: '" + p + "' (expected f32, tf32, bf16 or f16)");
}

int cmd_info(int argc, char** argv) {
  ArgParser p("soma info", "",
              "Prints this soma's version, CPU threads and build, and the CUDA devices it can\n"
              "use: name, memory, compute capability, driver, runtime and cuDNN versions.\n"
              "Says why when there is none (not built with CUDA, no driver, no GPU).");
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  std::printf("soma %s\n", SOMA_CLI_VERSION);
  std::printf("cpu: %d threads\n", get_num_threads());
  // The vector kernels' instruction set (runtime dispatch; SOMA_ISA lowers it).
  try {
    std::printf("cpu isa: %s\n", cpu_isa_summary().c_str());
  } catch (const std::exception& e) {
    std::printf("cpu isa: %s\n", e.what());
  }
  if (!cuda::is_built()) {
    std::printf("cuda: not built (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const int runtime = cuda::runtime_version(), driver = cuda::driver_version();
  std::printf("cuda: built; runtime %s, driver %s\n", cuda::cuda_version_str(runtime).c_str(),
              driver > 0 ? cuda::cuda_version_str(driver).c_str() : "not found");
  const int cudnn = cuda::cudnn_version();
  if (cudnn > 0)
    std::printf("cudnn: %s\n", cuda::cudnn_version_str(cudnn).c_str());
  else
    std::printf("cudnn: not loaded (%s)\n", cuda::cudnn_load_error().c_str());
  // TF32 (cuda::allow_tf32, SOMA_ALLOW_TF32): f32 matmul and convolution on tensor cores.
  if (cuda::allow_tf32())
    std::printf("tf32: on for f32 matmul/conv on compute capability >= 8.0 "
                "(SOMA_ALLOW_TF32=0: off)\n");
  else
    std::printf("tf32: off (full f32 products: SOMA_ALLOW_TF32=0 or set_allow_tf32(false))\n");
  if (!cuda::is_available()) {
    std::printf("cuda devices: none (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const int n = cuda::device_count();
  std::printf("cuda devices: %d\n", n);
  for (int i = 0; i < n; ++i) {
    try {
      const cuda::DeviceProperties d = cuda::device_properties(i);
      std::printf("  cuda:%d  %s  memory %s (%s free)  compute capability %d.%d  %d SMs  tf32 %s\n",
                  i, d.name.c_str(), detail::memory_size_str(d.total_memory).c_str(),
                  detail::memory_size_str(d.free_memory).c_str(), d.major, d.minor,
                  d.multiprocessors, cuda::tf32_active(i) ? "on" : "off");
    } catch (const std::exception& e) {
      std::printf("  cuda:%d  unusable: %s\n", i, e.what());
    }
  }
  return 0;
}

}  // namespace soma::cli
