// Inference throughput of an imported ONNX model (issue 24; bench/gpu_infer_compare.sh runs it
// beside PyTorch eager): one line per run,
//   bench_infer model=resnet18 source=... device=cuda:0 precision=tf32 batch=64 iters=30
//     ms_per_batch=... images_per_s=...
// usage: bench_infer [--model resnet18|FILE.onnx] [--device cpu|cuda|cuda:N] [--batch 64]
//                    [--precision f32|tf32|bf16] [--iters 30] [--warmup 5] [--image 224]
// --model resnet18 without a file: soma's own ResNet-18 (torchvision's layout: 7x7/2 stem, max
// pool, 4 stages of 2 basic blocks, 64-512 channels, 1x1/2 projections, global average pool,
// 1000 classes; random weights), written to ONNX and imported, so that the imported path runs
// as with a torchvision export. Precision: f32 (cuda::set_allow_tf32(false)), tf32 (TF32 tensor
// cores for f32 matmul and convolution), bf16 (soma::AutocastScope(bf16): bf16 products, f32
// activations; PyTorch's torch.autocast is the same contract). Timing: warm-up, then `iters`
// forward passes queued back to back and one device synchronisation.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"

using namespace soma;

namespace {

nn::SymbolicTensor conv_bn(nn::SymbolicTensor x, std::int64_t filters, std::int64_t kernel,
                           std::int64_t stride, bool relu) {
  x = nn::call(nn::Conv2D(filters, kernel, {.strides = stride, .padding = "same",
                                            .use_bias = false}),
               x);
  x = nn::call(nn::BatchNormalization({.axis = 1}), x);
  return relu ? nn::call(nn::ReLU(), x) : x;
}

nn::SymbolicTensor basic_block(nn::SymbolicTensor x, std::int64_t filters, std::int64_t stride,
                               bool project) {
  auto h = conv_bn(x, filters, 3, stride, true);
  h = conv_bn(h, filters, 3, 1, false);
  auto skip = project ? conv_bn(x, filters, 1, stride, false) : x;
  return nn::call(nn::ReLU(), nn::call(nn::Add(), {h, skip})[0]);
}

std::shared_ptr<nn::Model> resnet18(std::int64_t image) {
  auto x = nn::Input({3, image, image});
  auto h = conv_bn(x, 64, 7, 2, true);
  h = nn::call(nn::MaxPool2D(3, Size2(2), "same"), h);
  std::int64_t in = 64;
  for (std::int64_t filters : {64, 128, 256, 512}) {
    const std::int64_t stride = filters == 64 ? 1 : 2;
    h = basic_block(h, filters, stride, stride != 1 || in != filters);
    h = basic_block(h, filters, 1, false);
    in = filters;
  }
  h = nn::call(nn::GlobalAveragePooling2D(), h);
  return std::make_shared<nn::Model>(x, nn::call(nn::Dense(1000), h));
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_arg = "resnet18", device_arg = "cpu", precision = "f32";
  std::int64_t batch = 64, iters = 30, warmup = 5, image = 224;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model_arg = v;
    else if (k == "--device") device_arg = v;
    else if (k == "--precision") precision = v;
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--iters") iters = std::atoll(v.c_str());
    else if (k == "--warmup") warmup = std::atoll(v.c_str());
    else if (k == "--image") image = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "bench_infer: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (precision != "f32" && precision != "tf32" && precision != "bf16") {
    std::fprintf(stderr, "bench_infer: --precision must be f32, tf32 or bf16\n");
    return 2;
  }
  try {
    Device device = Device::cpu();
    if (device_arg != "cpu") {
      if (!cuda::is_available()) {
        std::printf("# skipped: --device %s but no usable GPU: %s\n", device_arg.c_str(),
                    cuda::unavailable_reason().c_str());
        return 0;
      }
      const auto colon = device_arg.find(':');
      device = Device::cuda(colon == std::string::npos ? 0 : std::atoi(device_arg.c_str() + colon + 1));
    }
    std::shared_ptr<nn::Model> model;
    std::string source;
    if (model_arg == "resnet18") {
      set_seed(1);
      auto own = resnet18(image);
      if (onnx::available()) {
        model = onnx::load_from_bytes(onnx::export_to_bytes(*own), {.trainable = false});
        source = "soma-resnet18-onnx";
      } else {
        model = own;
        source = "soma-resnet18-native";
      }
    } else {
      model = onnx::load(model_arg, {.trainable = false});
      source = model_arg;
    }
    model->eval();
    {  // what the import fused (one line, a comment for the scripts)
      std::ostringstream summary;
      model->summary(summary);
      const std::string first = summary.str().substr(0, summary.str().find('\n'));
      std::printf("# %s\n", first.c_str());
    }
    model->to(device);
    if (device.is_cuda()) cuda::set_allow_tf32(precision != "f32");
    std::optional<AutocastScope> autocast;
    if (precision == "bf16") autocast.emplace(DType::bf16);
    const Tensor x = random_normal({batch, 3, image, image}, 0.0, 1.0, DType::f32, 7).to(device);
    NoGradScope no_grad;
    auto sync = [&] {
      if (device.is_cuda()) cuda::synchronize(device.index);
    };
    Tensor y;
    for (std::int64_t i = 0; i < warmup; ++i) y = (*model)(x);
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iters; ++i) y = (*model)(x);
    sync();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("bench_infer model=resnet18 source=%s device=%s precision=%s batch=%lld iters=%lld "
                "ms_per_batch=%.3f images_per_s=%.1f\n",
                source.c_str(), device.str().c_str(), precision.c_str(), (long long)batch,
                (long long)iters, 1e3 * s / double(iters), double(batch * iters) / s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_infer: %s\n", e.what());
    return 1;
  }
}
