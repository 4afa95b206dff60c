#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace soma {

enum class DeviceKind : std::uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceKinds = 2;

// Where a tensor's storage lives. Moving data between devices is always explicit.
struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const {
    return kind == DeviceKind::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace soma
