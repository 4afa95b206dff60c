#!/usr/bin/env bash
# Builds and runs the op benchmarks; prints the median of 5 repetitions for each.
#   BUILD_DIR        build directory (default: build)
#   extra arguments go to the benchmark binary, e.g. --benchmark_filter='matmul'
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${BUILD_DIR:-build}"

bash scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DSOMA_BUILD_BENCH=ON
cmake --build "$BUILD_DIR" -j"$(nproc)" --target bench_ops
"$BUILD_DIR/bench/bench_ops" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  "$@"
