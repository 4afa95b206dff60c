#pragma once
// One intra-op thread pool (OpenMP), shared with the BLAS (OpenBLAS built on OpenMP), so the two
// never compete for cores. set_num_threads governs both.
namespace soma {
void set_num_threads(int n);
int get_num_threads();
}  // namespace soma
