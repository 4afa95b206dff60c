#!/usr/bin/env bash
# Installs the dependencies, builds soma and runs the main job: for now the linear-regression
# example (fits y = w x + b with a GradientTape and prints w and b).
#   BUILD_DIR   build directory (default: build)
#   extra arguments are passed to the CMake configure step
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"

bash scripts/install-deps.sh
bash scripts/build.sh "$@"
"$BUILD_DIR/examples/linear_regression/linear_regression"
