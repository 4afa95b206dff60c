#!/usr/bin/env bash
# Builds soma's libFuzzer targets with clang (libsoma itself instrumented: ASan + UBSan +
# coverage) and runs each target for a bounded time, starting from the generated seed corpus.
# Prints the executions per target; exits non-zero when a target crashed.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   default: 45 s, every target
#     targets: idx cifar csv png model_file model_config onnx
#   BUILD_DIR  build directory (default build-fuzz);  CLANGXX  (default clang++-14)
#
# Needs clang-14 and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes). A crashing
# input is written to $BUILD_DIR/fuzz-artifacts/<target>/; once the bug is fixed, copy it to
# fuzz/regressions/<target>/, where the default build's ctest `fuzz.regressions` replays it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECONDS_PER_TARGET="${1:-45}"
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=(idx cifar csv png model_file model_config onnx)
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
# Freed blocks must go back to ASan, not to the caching CPU allocator.
export SOMA_CPU_CACHE=0
CLANGXX="${CLANGXX:-clang++-14}"
CLANGC="${CLANGXX/clang++/clang}"

if ! command -v "$CLANGXX" >/dev/null; then
  echo "fuzz.sh: $CLANGXX not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_COMPILER="$CLANGXX" -DCMAKE_C_COMPILER="$CLANGC" \
    -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DBUILD_SHARED_LIBS=OFF -DSOMA_BUILD_FUZZ=ON -DSOMA_BUILD_TESTS=OFF \
    -DSOMA_BUILD_EXAMPLES=OFF -DSOMA_BUILD_APPS=OFF -DSOMA_BUILD_BENCH=OFF -DSOMA_NATIVE=OFF >/dev/null
fi
build_targets=(fuzz_seeds fuzz_replay)
for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target "${build_targets[@]}"

F="$BUILD_DIR/fuzz"
rm -rf "$F/seeds"
ASAN_OPTIONS=detect_leaks=0 "$F/fuzz_seeds" "$F/seeds" >/dev/null
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1

declare -A EXECS STATUS
for t in "${TARGETS[@]}"; do
  mkdir -p "$F/corpus/$t" "$F/fuzz-artifacts/$t"
  dict=()
  [[ $t == model_config || $t == model_file ]] && dict=(-dict=fuzz/dicts/json.dict)
  log="$F/fuzz-$t.log"
  echo "== fuzz_$t: ${SECONDS_PER_TARGET}s"
  set +e
  # -rss_limit_mb / -malloc_limit_mb: a parser that asks for more than this on a small input is
  # a bug (soma's own bound is 256 MB in the fuzzers, see fuzz/fuzz_target.hpp).
  "$F/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$F/fuzz-artifacts/$t/" "$F/corpus/$t" "$F/seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  EXECS[$t]=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [[ $rc -eq 0 ]]; then STATUS[$t]=ok; else STATUS[$t]="CRASH (rc $rc, see $log)"; fi
done

echo
printf '%-14s %12s %8s  %s\n' target executions corpus status
fail=0
for t in "${TARGETS[@]}"; do
  n=$(ls "$F/corpus/$t" | wc -l)
  printf '%-14s %12s %8s  %s\n' "$t" "${EXECS[$t]}" "$n" "${STATUS[$t]}"
  [[ ${STATUS[$t]} == ok ]] || fail=1
done
exit $fail
