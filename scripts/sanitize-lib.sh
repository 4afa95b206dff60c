# shellcheck shell=bash disable=SC2034
# Shared by scripts/sanitizers.sh, scripts/fuzz.sh and scripts/ci-sanitize.sh (sourced, not run):
# the sanitizer flags and runtime options, the combined clang ASan+UBSan+libFuzzer build, the
# TSan suite runner and the bounded fuzz runner. docs/reliability.md explains the choices.
# Expects ROOT (the source tree) and runs from it.

SOMA_ASAN_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
SOMA_FUZZ_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
SOMA_TSAN_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=thread"
# Threaded code checked by TSan: the thread pool and parallel_for, the data pipeline (map workers,
# prefetch thread), the readers on std::async, the global RNG, ops/tapes/models on several
# threads, graph mode's inter-op threads.
SOMA_TSAN_TESTS=(test_threading test_dataset test_data_readers test_random test_reliability_threads test_graph)
SOMA_FUZZ_TARGETS=(idx cifar csv png model_file model_config onnx)

soma_asan_env() {
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/scripts/lsan.supp}"
  # The caching CPU allocator would hide use-after-free of recycled blocks from ASan.
  export SOMA_CPU_CACHE=0
}

soma_tsan_env() {
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp}"
  # libgomp is not built with TSan: see docs/reliability.md.
  export OMP_NUM_THREADS=1
  # oneDNN's first JIT kernel dlopens VTune's libJitPI.so; TSan re-reads its called_from_lib
  # suppressions on every dlopen and dies when 'libopenblas.so.0' then matches two mappings
  # (test_graph's CNN case). soma does not need the profiler hook under TSan.
  export DNNL_JIT_PROFILE=0
}

soma_need_clang() {
  if ! command -v "$1" >/dev/null; then
    echo "$1 not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
    exit 2
  fi
}

# The combined clang build: static libsoma instrumented with ASan + UBSan + libFuzzer's coverage
# (fuzzer-no-link), so that one library serves the unit tests (plain ASan executables) and the
# fuzz_<target> executables (linked with -fsanitize=fuzzer). Examples, apps and bench off.
#   soma_configure_clang_asan BUILD_DIR [CLANGXX]
soma_configure_clang_asan() {
  local dir="$1" cxx="${2:-clang++-14}"
  soma_need_clang "$cxx"
  if [[ -f "$dir/CMakeCache.txt" ]] && grep -q '^SOMA_BUILD_TESTS:BOOL=ON' "$dir/CMakeCache.txt" &&
     grep -q '^SOMA_BUILD_FUZZ:BOOL=ON' "$dir/CMakeCache.txt"; then
    return 0
  fi
  # lld links the ~45 static, instrumented executables several times faster than GNU ld.
  local ld=""
  command -v ld.lld >/dev/null && ld="-fuse-ld=lld"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="${cxx/clang++/clang}" \
    -DCMAKE_CXX_FLAGS="$SOMA_FUZZ_FLAGS" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined $ld" \
    -DBUILD_SHARED_LIBS=OFF -DSOMA_BUILD_FUZZ=ON -DSOMA_BUILD_TESTS=ON \
    -DSOMA_BUILD_EXAMPLES=OFF -DSOMA_BUILD_APPS=OFF -DSOMA_BUILD_BENCH=OFF -DSOMA_NATIVE=OFF \
    -DSOMA_ENABLE_CUDA=OFF -DSOMA_ENABLE_NCCL=OFF >/dev/null
}

#   soma_configure_sanitizer BUILD_DIR FLAGS   (CXX picks the compiler; shared libsoma, CLI on)
soma_configure_sanitizer() {
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="$2" \
    -DCMAKE_EXE_LINKER_FLAGS="$2" -DCMAKE_SHARED_LINKER_FLAGS="$2" \
    -DSOMA_BUILD_EXAMPLES=OFF -DSOMA_BUILD_BENCH=OFF -DSOMA_NATIVE=ON \
    -DSOMA_ENABLE_CUDA=OFF -DSOMA_ENABLE_NCCL=OFF >/dev/null
}

# Runs gtest executables whole (one process per suite, much cheaper than ctest's one process per
# test under a sanitizer), PARALLEL at a time; the log of each goes to DIR/<name>.<tag>.log.
#   soma_run_suites TAG DIR PARALLEL EXE... ; env SOMA_GTEST_FILTER_<name> sets a suite's filter,
#   SOMA_GTEST_EXTRA (words) more gtest arguments for every suite.
# Sets SOMA_SUITES_FAILED (names) and SOMA_TESTS_PASSED / SOMA_TESTS_SKIPPED (counts).
soma_run_suites() {
  local tag="$1" dir="$2" par="$3"
  shift 3
  local exe
  export SOMA_GTEST_EXTRA="${SOMA_GTEST_EXTRA:-}"
  printf '%s\n' "$@" | xargs -P "$par" -I{} bash -c '
    exe="$1"; name=$(basename "$exe"); var="SOMA_GTEST_FILTER_$name"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    if "$exe" --gtest_brief=1 --gtest_filter="${!var:-*}" $SOMA_GTEST_EXTRA >"$2/$name.$3.log" 2>&1; then r=ok; else r=FAILED; fi
    printf "%-30s %-6s %5.1f s\n" "$name" "$r" "$(awk "BEGIN {print $(date +%s.%N) - $start}")"
  ' _ {} "$dir" "$tag" | tee "$dir/suites.$tag.txt"
  SOMA_SUITES_FAILED=$(awk '$2 == "FAILED" {print $1}' "$dir/suites.$tag.txt" | tr '\n' ' ')
  SOMA_TESTS_PASSED=0
  SOMA_TESTS_SKIPPED=0
  for exe in "$@"; do
    local n log="$dir/$(basename "$exe").$tag.log"
    # The last summary line: suites that re-run themselves in a child (a death test, a child
    # under a resource limit) print the child's summary too.
    n=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    SOMA_TESTS_PASSED=$((SOMA_TESTS_PASSED + ${n:-0}))
    n=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    SOMA_TESTS_SKIPPED=$((SOMA_TESTS_SKIPPED + ${n:-0}))
  done
  if [[ -n $SOMA_SUITES_FAILED ]]; then
    for exe in $SOMA_SUITES_FAILED; do
      echo "---- $exe ($dir/$exe.$tag.log, last lines)"
      tail -40 "$dir/$exe.$tag.log"
    done
    return 1
  fi
}

# Bounded libFuzzer runs from the generated seed corpus, the corpus kept in BUILD_DIR/fuzz/corpus
# and the regression inputs (fuzz/regressions/<target>/). Prints executions per target; returns
# non-zero when a target crashed. The fuzz_seeds and fuzz_<target> executables must be built.
#   soma_run_fuzzers BUILD_DIR SECONDS TARGET...
soma_run_fuzzers() {
  local dir="$1" secs="$2"
  shift 2
  local F="$dir/fuzz" t
  rm -rf "$F/seeds"
  ASAN_OPTIONS=detect_leaks=0 SOMA_CPU_CACHE=0 "$F/fuzz_seeds" "$F/seeds" >/dev/null
  (
    # Freed blocks must go back to ASan, not to the caching CPU allocator.
    export SOMA_CPU_CACHE=0 OMP_NUM_THREADS=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
    declare -A EXECS STATUS
    # FUZZ_JOBS targets at a time (default: the number of cores), each single-threaded, so the
    # stage takes about SECONDS x targets / FUZZ_JOBS of wall time.
    # (nproc honours OMP_NUM_THREADS, set to 1 just above: ask without it.)
    local jobs="${FUZZ_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}" running=0
    rm -f "$F"/fuzz-*.rc
    for t in "$@"; do
      mkdir -p "$F/corpus/$t" "$F/fuzz-artifacts/$t" "$F/seeds/$t"
      local dict=() regr=()
      [[ $t == model_config || $t == model_file ]] && dict=(-dict="$ROOT/fuzz/dicts/json.dict")
      [[ -d $ROOT/fuzz/regressions/$t ]] && regr=("$ROOT/fuzz/regressions/$t")
      local log="$F/fuzz-$t.log"
      echo "== fuzz_$t: ${secs}s"
      # -rss_limit_mb / -malloc_limit_mb: a parser that asks for more than this on a small input
      # is a bug (soma's own bound is 256 MB in the fuzzers, see fuzz/fuzz_target.hpp). The first
      # directory receives new corpus entries; the others (seeds, regressions) are read only.
      ( set +e
        "$F/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
          -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 "${dict[@]}" \
          -artifact_prefix="$F/fuzz-artifacts/$t/" "$F/corpus/$t" "$F/seeds/$t" "${regr[@]}" >"$log" 2>&1
        echo $? >"$F/fuzz-$t.rc" ) &
      running=$((running + 1))
      if (( running >= jobs )); then wait -n || true; running=$((running - 1)); fi
    done
    wait || true
    for t in "$@"; do
      local log="$F/fuzz-$t.log" rc
      rc=$(cat "$F/fuzz-$t.rc" 2>/dev/null || echo "?")
      EXECS[$t]=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
      if [[ $rc == 0 ]]; then STATUS[$t]=ok; else STATUS[$t]="CRASH (rc $rc, see $log)"; tail -30 "$log"; fi
    done
    echo
    printf '%-14s %12s %8s  %s\n' target executions corpus status
    local fail=0
    for t in "$@"; do
      printf '%-14s %12s %8s  %s\n' "$t" "${EXECS[$t]}" "$(ls "$F/corpus/$t" | wc -l)" "${STATUS[$t]}"
      [[ ${STATUS[$t]} == ok ]] || fail=1
    done
    exit $fail
  )
}

# TSan's gtest filters: tests that call set_num_threads(2) to compare 1- and 2-thread results
# start OpenMP worker threads despite OMP_NUM_THREADS=1; TSan reports their kernels' writes as
# races (libgomp's barriers are invisible to it), so they are filtered out. They check OpenMP
# determinism, which the plain build checks bit for bit.
soma_tsan_filters() {
  export SOMA_GTEST_FILTER_test_threading="${SOMA_GTEST_FILTER_test_threading:--*TwoThreads*}"
  export SOMA_GTEST_FILTER_test_random="${SOMA_GTEST_FILTER_test_random:--*ThreadCount*}"
}
