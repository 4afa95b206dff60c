#!/usr/bin/env bash
# The logic of scripts/gpu-check.sh that needs no GPU: its exit statuses and messages, with a
# fake nvidia-smi first on PATH.
#   gpu_check_test.sh GPU_CHECK_SCRIPT BUILD_DIR CASE
set -u
script=$1
build=$2
case_name=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/bin"

fail() { echo "FAIL [$case_name]: $*"; echo "--- output"; cat "$out/log" 2>/dev/null; exit 1; }
# fake_smi BODY: an nvidia-smi that runs BODY (sh)
fake_smi() { printf '#!/bin/sh\n%s\n' "$1" >"$out/bin/nvidia-smi"; chmod +x "$out/bin/nvidia-smi"; }
run() { PATH="$out/bin:$PATH" timeout 120 bash "$script" "$@" >"$out/log" 2>&1; status=$?; }
expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
expect_log() { grep -Eq -- "$1" "$out/log" || fail "output does not match /$1/"; }

case $case_name in
  driver_fails)
    fake_smi 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver"; exit 9'
    run --no-build --build-dir "$build"
    expect_status 3
    expect_log '^gpu-check: no NVIDIA GPU: nvidia-smi -L failed: NVIDIA-SMI has failed'
    expect_log 'nothing was run'
    ;;
  no_gpu_listed)
    fake_smi 'exit 0'
    run --no-build --build-dir "$build"
    expect_status 3
    expect_log '^gpu-check: no NVIDIA GPU: nvidia-smi lists no GPU$'
    ;;
  missing_build_dir)
    fake_smi 'case "$1" in -L) echo "GPU 0: Fake (UUID: GPU-0)";; *) echo "0, Fake, 1 MiB, 1.0, 9.0";; esac'
    run --no-build --build-dir "$out/nowhere"
    expect_status 4
    expect_log 'missing +build directory'
    ;;
  usage)
    run --frobnicate
    expect_status 2
    expect_log "unknown argument '--frobnicate'"
    run --help
    expect_status 0
    expect_log 'Exit status'
    run --needs --no-build --build-dir "$build"
    [ "$status" -eq 0 ] || [ "$status" -eq 4 ] || fail "--needs: exit status $status"
    expect_log 'timeout'
    ;;
  *)
    fail "unknown test case"
    ;;
esac
exit 0
