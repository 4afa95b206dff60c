#pragma once
// A simple weights file (until the io issue brings the checkpoint format):
//   "SOMAWTS1" (8 bytes), u64 count, then per tensor: u32 name length, name bytes, u8 dtype,
//   u32 rank, i64 extents[rank], u64 byte count, raw little-endian data (row-major).
// Written atomically (a temporary in the same directory, fsync, rename), so a crash or a full disk
// never leaves half a file.
// Model::save_weights now writes the model-file container (docs/model-format.md);
// read_weights_file reads both and returns the saving model's state_dict keys.
#include <map>
#include <string>

#include "soma/tensor.hpp"

namespace soma::model {

void write_weights_file(const std::string& path, const std::map<std::string, Tensor>& tensors);
std::map<std::string, Tensor> read_weights_file(const std::string& path);

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::write_weights_file;
using model::read_weights_file;
}  // namespace soma::nn
