#!/usr/bin/env bash
# Installs the dependencies, builds soma and runs the whole test suite with CTest.
#   BUILD_DIR   build directory (default: build); CTEST_JOBS parallel tests (default: 2)
#   SOMA_SLOW_TESTS=1 also runs the tests labelled `slow` (full Fashion-MNIST training)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"

bash scripts/install-deps.sh
bash scripts/build.sh "$@"
# Full-dataset learning tests are labelled `slow`; SOMA_SLOW_TESTS=1 includes them.
if [[ "${SOMA_SLOW_TESTS:-0}" == "1" ]]; then
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}"
else
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}" -LE slow
fi
