#pragma once
// Handlers of the ONNX importer's table (import.cpp, onnx_ops()) that live in their own files:
// import_control.cpp (If, Loop, Scan, sequences, optionals) and import_more.cpp (attention and
// convolution with state, windows, signal processing, ...). Each is listed in the table with its
// attributes.
#include <vector>

#include "onnx/import_node.hpp"

namespace soma::onnx::importer {

// import_more.cpp
std::vector<Tensor> linear_attention(const Node& n);
std::vector<Tensor> causal_conv_with_state(const Node& n);
std::vector<Tensor> swiglu(const Node& n);
template <int Kind>  // 0 Hann, 1 Hamming, 2 Blackman
std::vector<Tensor> window(const Node& n);
std::vector<Tensor> lrn(const Node& n);
// Resize's taps along one axis for the source coordinates `src`: n per output position, row-major
// (the index clamped to [0, in_len), its weight).
struct ResizeTaps {
  std::size_t n;
  std::vector<std::int64_t> index;
  std::vector<double> weight;
};
ResizeTaps resize_taps(const std::vector<double>& src, std::int64_t in_len, double scale,
                       bool cubic, bool antialias, double a, bool exclude_outside);
std::vector<Tensor> adagrad(const Node& n);
std::vector<Tensor> adam(const Node& n);
std::vector<Tensor> momentum(const Node& n);
std::vector<Tensor> binarizer(const Node& n);
std::vector<Tensor> array_feature_extractor(const Node& n);
std::vector<Tensor> reverse_sequence(const Node& n);
std::vector<Tensor> tensor_scatter(const Node& n);
std::vector<Tensor> affine_grid(const Node& n);
std::vector<Tensor> dft(const Node& n);
void check_dft(const LoadCheck& c);
std::vector<Tensor> non_zero(const Node& n);
std::vector<Tensor> compress(const Node& n);
std::vector<Tensor> unique(const Node& n);
std::vector<Tensor> non_max_suppression(const Node& n);
std::vector<Tensor> col2im(const Node& n);
std::vector<Tensor> max_unpool_nd(const Node& n);  // MaxUnpool beyond 2-D
std::vector<Tensor> batch_norm_training(const Node& n);
std::vector<Tensor> bit_cast(const Node& n);
void check_bit_cast(const LoadCheck& c);
std::vector<Tensor> grid_sample_nd(const Node& n);
std::vector<Tensor> scatter_nd_reduce(const Node& n);
std::vector<Tensor> roi_align(const Node& n);
std::vector<Tensor> upsample(const Node& n);
std::vector<Tensor> mel_weight_matrix(const Node& n);
enum class PoolKind { max, avg, lp };
std::vector<Tensor> pool_nd(const Node& n, PoolKind kind);
std::vector<Tensor> stft(const Node& n);
std::vector<Tensor> adagrad(const Node& n);
std::vector<Tensor> adam(const Node& n);
std::vector<Tensor> momentum(const Node& n);
std::vector<Tensor> binarizer(const Node& n);
std::vector<Tensor> array_feature_extractor(const Node& n);
std::vector<Tensor> reverse_sequence(const Node& n);
std::vector<Tensor> tensor_scatter(const Node& n);
std::vector<Tensor> affine_grid(const Node& n);

// import_control.cpp
std::vector<Value> if_(const Node& n);
std::vector<Value> loop(const Node& n);
std::vector<Tensor> scan(const Node& n);
void check_scan(const LoadCheck& c);
std::vector<Value> sequence_empty(const Node& n);
std::vector<Value> sequence_construct(const Node& n);
std::vector<Value> sequence_insert(const Node& n);
std::vector<Value> sequence_at(const Node& n);
std::vector<Value> sequence_erase(const Node& n);
std::vector<Value> sequence_length(const Node& n);
std::vector<Value> concat_from_sequence(const Node& n);
std::vector<Value> split_to_sequence(const Node& n);
std::vector<Value> sequence_map(const Node& n);
std::vector<Value> optional(const Node& n);
std::vector<Value> optional_has_element(const Node& n);
std::vector<Value> optional_get_element(const Node& n);
std::vector<Value> identity_value(const Node& n);

}  // namespace soma::onnx::importer
