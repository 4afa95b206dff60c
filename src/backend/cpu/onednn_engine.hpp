#pragma once
// Internal: the one CPU engine that soma's oneDNN calls share (oneDNN's primitive cache is limited
// when it is created: limit_onednn_primitive_cache) and this thread's stream on it. Defined in
// onednn_matmul.cpp; only for files compiled with oneDNN (SOMA_HAS_ONEDNN).
#include <oneapi/dnnl/dnnl.hpp>

#include "internal/cpu_allocator.hpp"

namespace soma::detail {

dnnl::engine& onednn_cpu_engine();
dnnl::stream& onednn_cpu_stream();

// Binds `m` to `nbytes` from soma's caching allocator, held by `buf` for one call (nothing bound
// for 0 bytes): the primitive caches keep no activation-sized memory between calls.
inline void bind_call_buffer(dnnl::memory& m, std::size_t nbytes, CpuBuffer& buf) {
  buf.reset(nbytes);
  if (nbytes) m.set_data_handle(buf.get());
}

}  // namespace soma::detail
