#!/usr/bin/env bash
# Builds soma under a sanitizer in its own build directory and runs tests there.
#
#   bash scripts/sanitizers.sh asan [CTEST_ARGS...]   AddressSanitizer + UndefinedBehaviorSanitizer
#       (leak checking on): every unit test, the fuzz replay and the CLI tests (ctest -LE slow).
#   bash scripts/sanitizers.sh tsan [GTEST_ARGS...]  ThreadSanitizer over the threaded code: the
#       data pipeline (map workers, prefetch thread), the reader threads, the thread pool and
#       parallel_for, the global RNG and settings used from several threads, graph mode's inter-op
#       threads.
#
#   BUILD_DIR   default build-asan / build-tsan;  CXX  compiler (default: c++, i.e. gcc; clang works)
#   JOBS        build jobs (default nproc);  CTEST_JOBS  parallel tests (default 2)
#
# CI runs scripts/ci-sanitize.sh instead (one clang build shared with the fuzzers); both take
# their flags, options and runners from scripts/sanitize-lib.sh.
# OpenMP under TSan: libgomp is not built with TSan, so its barriers are invisible and every
# OpenMP parallel region would be reported as a race. The TSan run therefore sets
# OMP_NUM_THREADS=1 (parallel regions run on the calling thread; soma's own threads - dataset
# workers, prefetch, std::async readers - are still checked) and loads scripts/tsan.supp for the
# few reports inside libgomp/OpenBLAS themselves. docs/reliability.md has the figures.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/sanitize-lib.sh
source "$ROOT/scripts/sanitize-lib.sh"

MODE="${1:-}"
shift || true
case "$MODE" in
  asan)
    BUILD_DIR="${BUILD_DIR:-build-asan}"
    FLAGS="$SOMA_ASAN_FLAGS"
    soma_asan_env
    ;;
  tsan)
    BUILD_DIR="${BUILD_DIR:-build-tsan}"
    FLAGS="$SOMA_TSAN_FLAGS"
    soma_tsan_env
    ;;
  *)
    echo "usage: bash scripts/sanitizers.sh asan|tsan [ctest args...]" >&2
    exit 2
    ;;
esac

start=$(date +%s)
soma_configure_sanitizer "$BUILD_DIR" "$FLAGS"
if [[ $MODE == asan ]]; then
  cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}"
  built=$(date +%s)
  # install_and_consume rebuilds soma from scratch in a temporary prefix: left to the plain build.
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}" -LE slow \
    -E '^install_and_consume$' "$@"
else
  cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target "${SOMA_TSAN_TESTS[@]}"
  built=$(date +%s)
  soma_tsan_filters
  export OMP_WAIT_POLICY=PASSIVE SOMA_GTEST_EXTRA="$*"
  # Each suite runs whole (gtest_discover_tests names ctest cases by test, not by executable).
  suites=()
  for t in "${SOMA_TSAN_TESTS[@]}"; do suites+=("$BUILD_DIR/tests/$t"); done
  if ! soma_run_suites tsan "$BUILD_DIR" 1 "${suites[@]}"; then
    echo "sanitizers.sh tsan: FAILED: $SOMA_SUITES_FAILED (logs in $BUILD_DIR/*.tsan.log)"
    exit 1
  fi
  echo "sanitizers.sh tsan: $SOMA_TESTS_PASSED tests passed"
fi
end=$(date +%s)
echo "sanitizers.sh $MODE: build $((built - start)) s, tests $((end - built)) s"
