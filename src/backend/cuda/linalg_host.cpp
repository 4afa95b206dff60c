// CUDA kernels of the LAPACK-backed linalg ops (solve, inv, det, slogdet, cholesky, qr, svd,
// eigh): for now a round trip through the host. The inputs are copied to the CPU, the LAPACK
// kernel of src/backend/cpu/lapack.cpp runs there, and the outputs are copied back into the
// device tensors; results, errors (singular matrix, batch index) and NaN handling are the CPU's.
// Correct, but it pays two transfers and a synchronisation per call: cuSOLVER opened with
// dlopen (as cublas_loader does for cuBLAS) is the fast path still to write (docs/cuda.md).
#include <vector>

#include "internal/copy.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

void on_host(const char* op, const std::vector<Tensor>& in, std::vector<Tensor>& out,
             const Attrs& attrs) {
  const KernelFn cpu = get_op(op).kernels[int(DeviceKind::CPU)];
  if (!cpu) fail(op, "has no CPU kernel to run on the host");
  std::vector<Tensor> host_in, host_out;
  for (const Tensor& t : in) host_in.push_back(t.to(Device::cpu()));
  for (const Tensor& t : out) host_out.push_back(Tensor::empty(t.shape(), t.dtype()));
  cpu(host_in, host_out, attrs);
  // copy_into copies within one device: the result goes over with to(), then into place.
  for (std::size_t k = 0; k < out.size(); ++k) copy_into(host_out[k].to(out[k].device()), out[k]);
}

}  // namespace

void register_cuda_linalg_kernels() {
#define SOMA_ON_HOST(NAME)                                                                  \
  register_kernel(NAME, DeviceKind::CUDA,                                                   \
                  [](const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) { \
                    on_host(NAME, in, out, a);                                              \
                  });
  SOMA_ON_HOST("linalg_solve")
  SOMA_ON_HOST("linalg_inv")
  SOMA_ON_HOST("linalg_det")
  SOMA_ON_HOST("linalg_slogdet")
  SOMA_ON_HOST("linalg_cholesky")
  SOMA_ON_HOST("linalg_qr")
  SOMA_ON_HOST("linalg_svd")
  SOMA_ON_HOST("linalg_eigh")
#undef SOMA_ON_HOST
}

}  // namespace soma::detail
