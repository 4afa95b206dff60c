#!/usr/bin/env bash
# Builds soma's libFuzzer targets with clang (libsoma itself instrumented: ASan + UBSan +
# coverage) and runs each target for a bounded time, starting from the generated seed corpus and
# fuzz/regressions/<target>/. Prints the executions per target; exits non-zero when a target crashed.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   default: 45 s, every target
#     targets: idx cifar csv png model_file model_config onnx
#   BUILD_DIR  build directory (default build-fuzz);  CLANGXX  (default clang++-14)
#
# The build directory is the combined clang build of scripts/ci-sanitize.sh (unit tests included,
# only the fuzz targets are built here); flags and the runner live in scripts/sanitize-lib.sh.
# Needs clang-14 and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes). A crashing
# input is written to $BUILD_DIR/fuzz/fuzz-artifacts/<target>/; once the bug is fixed, copy it to
# fuzz/regressions/<target>/, where ctest `fuzz.regressions` replays it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/sanitize-lib.sh
source "$ROOT/scripts/sanitize-lib.sh"

SECONDS_PER_TARGET="${1:-45}"
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=("${SOMA_FUZZ_TARGETS[@]}")
BUILD_DIR="${BUILD_DIR:-build-fuzz}"

soma_configure_clang_asan "$BUILD_DIR" "${CLANGXX:-clang++-14}"
build_targets=(fuzz_seeds fuzz_replay)
for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target "${build_targets[@]}"
soma_run_fuzzers "$BUILD_DIR" "$SECONDS_PER_TARGET" "${TARGETS[@]}"
