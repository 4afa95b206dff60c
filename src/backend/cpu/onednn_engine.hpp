#pragma once
// Internal: the one CPU engine that soma's oneDNN calls share (oneDNN's primitive cache is limited
// when it is created: limit_onednn_primitive_cache) and this thread's stream on it. Defined in
// onednn_matmul.cpp; only for files compiled with oneDNN (SOMA_HAS_ONEDNN).
#include <oneapi/dnnl/dnnl.hpp>

namespace soma::detail {

dnnl::engine& onednn_cpu_engine();
dnnl::stream& onednn_cpu_stream();

}  // namespace soma::detail
