#pragma once
// Internal: the functions that fill the op registry, one per area. Op definitions (src/ops/) are
// registered first, then each backend attaches its kernels (src/backend/<device>/).
namespace soma::detail {
void register_elementwise_ops();  // also registers the view ops
void register_reduction_ops();
void register_shape_ops();
void register_linalg_ops();
void register_lapack_ops();  // solve, inv, det, ... (src/ops/linalg_lapack.cpp), from register_linalg_ops
void register_nn_ops();  // convolution and pooling
void register_random_ops();  // with their CPU kernels (src/ops/random.cpp)
void register_layer_ops();  // dense_bias_act (src/ops/dense.cpp), optimiser updates (optim_updates.cpp)
void register_attention_ops();  // scaled_dot_product_attention (src/ops/attention.cpp)
void register_sort_scan_ops();  // cumsum, sort, topk, scatter, ... (src/ops/sort_scan.cpp)
void register_quantize_ops();  // quantize_linear, dequantize_linear (src/ops/quantize.cpp)

void register_cpu_elementwise_kernels();
void register_cpu_reduction_kernels();
void register_cpu_shape_kernels();
void register_cpu_linalg_kernels();
void register_cpu_lapack_kernels();  // src/backend/cpu/lapack.cpp, from register_cpu_linalg_kernels
void register_cpu_nn_kernels();
void register_cpu_attention_kernels();
void register_cpu_sort_scan_kernels();
void register_cpu_quantize_kernels();
}  // namespace soma::detail
