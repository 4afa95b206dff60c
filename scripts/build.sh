#!/usr/bin/env bash
# Configures (Release, Ninja) and builds soma: by default everything the options enable (the
# tests, examples and benchmarks included); BUILD_TARGETS names a few targets instead.
#   BUILD_DIR      build directory, relative to the repository root or absolute (default: build)
#   BUILD_TYPE     CMake build type (default: Release)
#   BUILD_TARGETS  targets to build, space-separated (default: all), e.g. "soma_cli fashion_mnist"
#   extra arguments are passed to the CMake configure step, e.g. -DSOMA_NATIVE=OFF
# Prints how long the configure and the build took.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"
BUILD_TYPE="${BUILD_TYPE:-Release}"

t0=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
t1=$(date +%s)
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
t2=$(date +%s)
echo "build.sh: configure $((t1 - t0)) s, build $((t2 - t1)) s (${BUILD_TARGETS:-all targets}, $(nproc) jobs)"
