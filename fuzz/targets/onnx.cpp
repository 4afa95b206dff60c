// ONNX import (soma::onnx::load_from_bytes): protobuf parsing, then the graph's interpretation.
#include <string>

#include "fuzz_target.hpp"
#include "soma/onnx.hpp"

namespace soma::fuzz {

void onnx(const std::uint8_t* data, std::size_t size) {
  if (!soma::onnx::available()) return;
  auto m = soma::onnx::load_from_bytes(std::string(reinterpret_cast<const char*>(data), size));
  (void)m;
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::onnx)
