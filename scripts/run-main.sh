#!/usr/bin/env bash
# Installs the dependencies, builds soma and runs the main job: train the MLP 784-128-128-10 on
# the bundled default data set (Fashion-MNIST from Debian's dataset-fashion-mnist) for 5 epochs
# with a Keras-style progress bar, then print the test accuracy.
#   BUILD_DIR   build directory (default: build)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"

bash scripts/install-deps.sh
bash scripts/build.sh "$@"
"$BUILD_DIR/examples/fashion_mnist/fashion_mnist"
