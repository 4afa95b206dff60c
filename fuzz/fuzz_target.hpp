#pragma once
// Shared by the libFuzzer targets (fuzz_*.cpp) and the regression replay (replay.cpp).
//
// A target takes arbitrary bytes and hands them to one parser. The contract is the issue's: the
// parser either succeeds or throws soma::Error. Anything else (another exception type, a crash,
// a sanitizer report, a hang, an allocation beyond the bound) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace soma::fuzz {

using TargetFn = void (*)(const std::uint8_t* data, std::size_t size);

struct Target {
  const char* name;  // the directory name under fuzz/regressions/ and the corpus
  TargetFn fn;
};

// Every target, for the replay program.
const std::vector<Target>& all_targets();

// Writes bytes to an in-memory file and returns a path that opens it (/proc/self/fd/N of a
// memfd), so the path-taking readers run without touching the disk. One file per slot.
std::string memory_file(const std::uint8_t* data, std::size_t size, int slot = 0);

// Process-wide setup for fuzzing: one thread, a small allocation bound (a parser must refuse an
// absurd size itself, before asking for it).
void setup();

// Runs fn on the bytes; returns 1 if it threw soma::Error, 0 on success, and aborts (reporting
// the exception) on any other exception.
int run_one(TargetFn fn, const std::uint8_t* data, std::size_t size, const char* target,
            std::string* message = nullptr);

// The allocation bound for fuzzing, also used by the replay test.
inline constexpr std::size_t kFuzzMaxAllocation = std::size_t(256) << 20;

}  // namespace soma::fuzz

// Defines the libFuzzer entry point for one target (only in the libFuzzer build).
#ifdef SOMA_LIBFUZZER
#define SOMA_FUZZ_ENTRY(fn)                                                          \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                              \
    soma::fuzz::setup();                                                            \
    return 0;                                                                       \
  }                                                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    soma::fuzz::run_one(fn, data, size, #fn);                                       \
    return 0;                                                                       \
  }
#else
#define SOMA_FUZZ_ENTRY(fn)
#endif
