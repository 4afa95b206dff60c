#!/usr/bin/env bash
# The Debian packages as a user meets them: `cpack -G DEB` in a built tree makes libsoma,
# libsoma-dev and soma; they are unpacked into an empty root (dpkg -x: no root rights, nothing
# touches the system), and the consumer project is built against that root with CMake
# (find_package) and with pkg-config, and run; the packaged `soma` command prints its version.
#   usage: run_package_test.sh <soma build dir> [c++ compiler]
set -euo pipefail

BUILD_DIR="$(cd "$1" && pwd)"
CXX_COMPILER="${2:-c++}"
SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in cpack dpkg-deb pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || { echo "package test: $tool not found; skipped"; exit 77; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/soma-package.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "== cpack -G DEB"
(cd "$WORK" && cpack -G DEB --config "$BUILD_DIR/CPackConfig.cmake" -B "$WORK/debs" >"$WORK/cpack.log" 2>&1) || {
  cat "$WORK/cpack.log" >&2; exit 1; }
for pkg in libsoma libsoma-dev soma; do
  deb=$(ls "$WORK"/debs/${pkg}_*.deb 2>/dev/null | head -1)
  [[ -n "$deb" ]] || { echo "package test: no $pkg package made" >&2; ls "$WORK/debs" >&2; exit 1; }
  echo "-- $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
  dpkg-deb -x "$deb" "$WORK/root"
done
# The versioned library comes from libsoma, the unversioned link (for -lsoma) from libsoma-dev.
for pkg_file in 'libsoma:libsoma\.so\.[0-9.]+$' 'libsoma-dev:libsoma\.so ->' 'libsoma-dev:soma\.pc$'; do
  listing=$(dpkg-deb -c "$WORK"/debs/${pkg_file%%:*}_*.deb)
  grep -Eq "/${pkg_file#*:}" <<<"$listing" || {
    echo "package test: ${pkg_file#*:} is not in ${pkg_file%%:*}" >&2; exit 1; }
done

echo "== the packaged soma command"
soma_bin=$(find "$WORK/root" -path '*/bin/soma' | head -1)
"$soma_bin" --version

prefix="$WORK/root/usr"
echo "== consumer with CMake"
args=(-S "$SRC_DIR" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
      -DCMAKE_CXX_COMPILER="$CXX_COMPILER")
if command -v ccache >/dev/null 2>&1; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake "${args[@]}" >"$WORK/configure.log" || { cat "$WORK/configure.log" >&2; exit 1; }
grep -q "^soma_DIR:PATH=$prefix/" "$WORK/build/CMakeCache.txt" || {
  echo "package test: soma was not found under $prefix" >&2; exit 1; }
cmake --build "$WORK/build" >/dev/null
"$WORK/build/consumer"

echo "== consumer with pkg-config"
pc_dir=$(dirname "$(find "$prefix" -name soma.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs soma)
libdir=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --variable=libdir soma)
# shellcheck disable=SC2086
"$CXX_COMPILER" -std=c++20 -O1 "$SRC_DIR/main.cpp" -o "$WORK/consumer-pc" $flags -Wl,-rpath,"$libdir"
"$WORK/consumer-pc"
echo "package test: passed"
