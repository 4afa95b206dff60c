#!/usr/bin/env bash
# Installs a built soma into a fresh temporary prefix, then configures, builds and runs the
# consumer project against it with find_package(soma). Any failing step fails the test.
#   usage: run_consumer_test.sh <soma build dir> [cmake generator] [c++ compiler]
set -euo pipefail

BUILD_DIR="$1"
GENERATOR="${2:-}"
CXX_COMPILER="${3:-}"
SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/soma-consumer.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "== install soma into $WORK/prefix"
cmake --install "$BUILD_DIR" --prefix "$WORK/prefix"

echo "== configure the consumer"
args=(-S "$SRC_DIR" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix")
[[ -n "$GENERATOR" ]] && args+=(-G "$GENERATOR")
[[ -n "$CXX_COMPILER" ]] && args+=(-DCMAKE_CXX_COMPILER="$CXX_COMPILER")
if command -v ccache >/dev/null 2>&1; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake "${args[@]}"

# The consumer must have found the installed tree, not soma's build tree.
grep -q "^soma_DIR:PATH=$WORK/prefix/" "$WORK/build/CMakeCache.txt" || {
  echo "consumer test: soma was not found under $WORK/prefix" >&2
  grep '^soma_DIR' "$WORK/build/CMakeCache.txt" >&2 || true
  exit 1
}

echo "== build the consumer"
cmake --build "$WORK/build"

echo "== run the consumer"
"$WORK/build/consumer"

# The same program built with pkg-config instead of CMake (soma.pc finds its prefix from its own
# place, so the temporary prefix needs no --define-variable).
if command -v pkg-config >/dev/null 2>&1; then
  echo "== build the consumer with pkg-config"
  pc_dir=$(dirname "$(find "$WORK/prefix" -name soma.pc | head -1)")
  [[ -n "$pc_dir" && -f "$pc_dir/soma.pc" ]] || { echo "consumer test: no soma.pc installed" >&2; exit 1; }
  flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs soma)
  libdir=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --variable=libdir soma)
  cxx="${CXX_COMPILER:-c++}"
  # shellcheck disable=SC2086  # flags is a word list
  "$cxx" -std=c++20 -O1 "$SRC_DIR/main.cpp" -o "$WORK/consumer-pc" $flags -Wl,-rpath,"$libdir"
  "$WORK/consumer-pc"
fi
