#!/usr/bin/env bash
# Configures (Release, Ninja) and builds soma with its tests, examples and benchmarks.
#   BUILD_DIR   build directory, relative to the repository root or absolute (default: build)
#   BUILD_TYPE  CMake build type (default: Release)
#   extra arguments are passed to the CMake configure step, e.g. -DSOMA_NATIVE=OFF
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"
BUILD_TYPE="${BUILD_TYPE:-Release}"

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
