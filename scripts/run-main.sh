#!/usr/bin/env bash
# Installs what the main job needs, builds it and runs it: train the MLP 784-128-128-10 on the
# bundled default data set (Fashion-MNIST from Debian's dataset-fashion-mnist) for 5 epochs with
# a Keras-style progress bar, then print the test accuracy.
# It installs and builds only that: libsoma, the `soma` command and the example (no tests,
# benchmarks or test-only packages; scripts/test.sh adds them). An existing build directory is
# reused with its options; a new one is configured without tests and benchmarks.
#   BUILD_DIR   build directory (default: build)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"
start=$(date +%s)

bash scripts/install-deps.sh --main
deps=$(date +%s)
options=()
[[ -f $BUILD_DIR/CMakeCache.txt ]] || options=(-DSOMA_BUILD_TESTS=OFF -DSOMA_BUILD_BENCH=OFF)
BUILD_TARGETS="soma_cli fashion_mnist" bash scripts/build.sh "${options[@]}" "$@"
built=$(date +%s)
"$BUILD_DIR/examples/fashion_mnist/fashion_mnist"
echo "run-main.sh: dependencies $((deps - start)) s, build $((built - deps)) s, training $(( $(date +%s) - built )) s"
