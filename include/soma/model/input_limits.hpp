#pragma once
// Moved to soma/input_limits.hpp (core: data readers, layers and ONNX import read the limits
// too); this header stays for source compatibility.
#include "soma/input_limits.hpp"
