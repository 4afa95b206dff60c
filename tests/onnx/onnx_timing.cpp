// Timing of ONNX export/import and of an imported model's forward pass against the native model.
// Not part of the build (a one-off measurement for docs/onnx.md); from the repository root:
//   g++ -std=c++20 -O2 -Iinclude tests/onnx/onnx_timing.cpp -Lbuild -lsoma -Wl,-rpath,$PWD/build -o /tmp/onnx_timing && /tmp/onnx_timing
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <soma/soma.hpp>
using namespace soma;
template <class F> double med(F f) {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    auto a = std::chrono::steady_clock::now(); f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end()); return t[3];
}
int main() {
  set_num_threads(1);
  nn::Sequential mlp{nn::Input({784}), nn::Dense(128, nn::relu), nn::Dense(128, nn::relu), nn::Dense(10)};
  nn::Sequential cnn{nn::Input({1, 28, 28}), nn::Conv2D(16, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2),
                     nn::Conv2D(32, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2), nn::Flatten(), nn::Dense(10)};
  for (auto* m : {(nn::Model*)&mlp, (nn::Model*)&cnn}) {
    Tensor x = random_normal(m == &mlp ? Shape{256, 784} : Shape{64, 1, 28, 28});
    double te = med([&] { onnx::export_to_bytes(*m); });
    std::string bytes = onnx::export_to_bytes(*m);
    double tl = med([&] { onnx::load_from_bytes(bytes); });
    auto l = onnx::load_from_bytes(bytes);
    m->eval(); l->eval();
    double tn = med([&] { (*m)(x); });
    double ti = med([&] { (*l)(x); });
    std::printf("%s: export %.2f ms, load %.2f ms, %zu bytes; forward native %.3f ms, imported %.3f ms, ratio %.3f\n",
                m == &mlp ? "mlp 784-128-128-10 batch 256" : "cnn 2xconv batch 64", te, tl, bytes.size(), tn, ti, ti / tn);
  }
}
