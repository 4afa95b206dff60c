// Every registered op has a CUDA kernel, except those of the allowlist below. Runs without a GPU
// (registering kernels touches no device), whenever libsoma was built with the CUDA backend.
// The allowlist only shrinks: an op on it that gained a kernel fails the test too, so the list
// stays the exact set of ops a model cannot yet run on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "soma/cuda.hpp"
#include "soma/soma.hpp"

using namespace soma;

namespace {

// Ops allowed to have no CUDA kernel, each with its reason (empty since issue 22). Delete a line
// when its kernel lands (this test names the lines to delete).
const std::set<std::string> kNoCudaKernelYet = {
#include "cuda_kernel_allowlist.inc"
};

std::set<std::string> ops_without_cuda_kernel() {
  std::set<std::string> missing;
  for (const OpDef* d : all_ops())
    if (!d->kernels[int(DeviceKind::CUDA)]) missing.insert(d->name);
  return missing;
}

std::string join(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += "  \"" + n + "\",\n";
  return s;
}

}  // namespace

TEST(CudaKernelCoverage, EveryOpHasACudaKernelOrIsAllowlisted) {
  if (!cuda::is_built()) GTEST_SKIP() << "soma was built without CUDA: " << cuda::unavailable_reason();
  std::set<std::string> unexpected;
  for (const auto& n : ops_without_cuda_kernel())
    if (!kNoCudaKernelYet.count(n)) unexpected.insert(n);
  EXPECT_TRUE(unexpected.empty())
      << unexpected.size() << " op(s) have no CUDA kernel and are not on the allowlist "
      << "(tests/unit/cuda_kernel_allowlist.inc): a new op needs its CUDA kernel with its CPU one:\n"
      << join(unexpected);
}

TEST(CudaKernelCoverage, AllowlistHoldsOnlyOpsWithoutAKernel) {
  if (!cuda::is_built()) GTEST_SKIP() << "soma was built without CUDA: " << cuda::unavailable_reason();
  const std::set<std::string> missing = ops_without_cuda_kernel();
  std::set<std::string> registered, stale, unknown;
  for (const OpDef* d : all_ops()) registered.insert(d->name);
  for (const auto& n : kNoCudaKernelYet) {
    if (!registered.count(n))
      unknown.insert(n);
    else if (!missing.count(n))
      stale.insert(n);
  }
  EXPECT_TRUE(stale.empty()) << "these ops have a CUDA kernel now: delete their lines from "
                             << "tests/unit/cuda_kernel_allowlist.inc:\n"
                             << join(stale);
  EXPECT_TRUE(unknown.empty()) << "the allowlist names ops that are not registered (renamed or "
                               << "removed?): delete or rename their lines:\n"
                               << join(unknown);
}

// What the coverage is today, in the test log (the allowlist's size is the number to bring down).
TEST(CudaKernelCoverage, Report) {
  if (!cuda::is_built()) GTEST_SKIP() << "soma was built without CUDA: " << cuda::unavailable_reason();
  const std::size_t total = all_ops().size(), missing = ops_without_cuda_kernel().size();
  std::printf("CUDA kernels: %zu of %zu ops (%zu without)\n", total - missing, total, missing);
  EXPECT_LE(missing, total);
}
