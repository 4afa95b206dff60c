#!/usr/bin/env bash
# Installs the dependencies, builds soma and runs the whole test suite with CTest.
#   BUILD_DIR   build directory (default: build); CTEST_JOBS parallel tests (default: 2)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"

bash scripts/install-deps.sh
bash scripts/build.sh "$@"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}"
