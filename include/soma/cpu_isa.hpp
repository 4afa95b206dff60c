#pragma once
// Which instruction set soma's CPU kernels run with. A portable build (SOMA_NATIVE=OFF, the
// default) holds its vector kernels once per target and picks one at start-up from what the CPU
// supports; the environment variable SOMA_ISA=baseline|avx|avx2|avx512 lowers the choice
// (docs/performance.md, "ISA dispatch").
#include <string>

namespace soma {
// The target the kernels run with: "baseline", "avx", "avx2" or "avx512".
std::string cpu_isa();
// One line for `soma info`: the target chosen, why, what the CPU supports and what is compiled.
std::string cpu_isa_summary();
}  // namespace soma
