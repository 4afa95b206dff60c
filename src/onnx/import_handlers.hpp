#pragma once
// Handlers of the ONNX importer's table (import.cpp, onnx_ops()) that live in their own files:
// import_control.cpp (If, Loop, Scan, sequences, optionals), import_more.cpp (signal processing,
// attention variants, pooling in any rank, ...). Each is listed in the table with its
// attributes; the checks at load sit beside it.
#include <vector>

#include "onnx/import_node.hpp"

namespace soma::onnx::importer {

}  // namespace soma::onnx::importer
