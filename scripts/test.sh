#!/usr/bin/env bash
# Installs the dependencies (Debian's packages and the pinned Python oracles of
# scripts/oracles.lock), builds soma with its tests, examples and benchmarks and runs the whole
# test suite with CTest.
#   BUILD_DIR   build directory (default: build); CTEST_JOBS parallel tests (default: 2)
#   SOMA_SLOW_TESTS=1 also runs the tests labelled `slow` (full Fashion-MNIST training)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"
start=$(date +%s)

bash scripts/install-deps.sh
deps=$(date +%s)
# (explicit: a build directory that scripts/run-main.sh made has them off)
bash scripts/build.sh -DSOMA_BUILD_TESTS=ON -DSOMA_BUILD_BENCH=ON "$@"
built=$(date +%s)
# The oracles see nothing of the user's own Python packages (the pinned environment has no user
# site-packages; Debian's python3, for python3-torch, is told so).
export PYTHONNOUSERSITE=1
unset PYTHONPATH
status=0
# Full-dataset learning tests are labelled `slow`; SOMA_SLOW_TESTS=1 includes them.
if [[ "${SOMA_SLOW_TESTS:-0}" == "1" ]]; then
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}" || status=$?
else
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}" -LE slow || status=$?
fi
echo "test.sh: dependencies $((deps - start)) s, build $((built - deps)) s, tests $(( $(date +%s) - built )) s"
exit "$status"
