#!/usr/bin/env bash
# Installs what soma needs on Debian 12. Idempotent: when every package is already installed it
# only asks dpkg and returns (no apt-get update, no network).
#   bash scripts/install-deps.sh          everything: the library, the tests, CI's sanitizer job,
#                                         and the pinned Python oracles (scripts/oracles.sh)
#   bash scripts/install-deps.sh --main   what libsoma, the `soma` command and the examples need
#                                         to build and run, and the default data set: the main
#                                         job (scripts/run-main.sh), nothing test-only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE=all
case "${1:-}" in
  --main) PROFILE=main ;;
  "") ;;
  *) echo "install-deps: unknown argument '$1' (--main, or nothing for everything)" >&2; exit 2 ;;
esac

# The library and the main job. OpenBLAS must be the OpenMP build (libopenblas-openmp-dev, not
# -pthread-dev) so that BLAS and soma's own loops share one thread pool.
MAIN_PACKAGES=(
  build-essential
  cmake
  ninja-build
  ccache
  pkg-config
  libopenblas-openmp-dev
  # LAPACK's C interface for soma::linalg (over OpenBLAS's LAPACK)
  liblapacke-dev
  protobuf-compiler
  libprotobuf-dev
  zlib1g-dev
  libpng-dev
  nlohmann-json3-dev
  # Keras .weights.h5 / .h5 weight files (optional at build time; docs/keras.md)
  libhdf5-dev
  dataset-fashion-mnist
  # ONNX export/import
  libonnx-dev
  # Distributed training over MPI
  libopenmpi-dev
  # oneDNN: convolution primitives and bf16 matrix work on the CPU (optional at build time)
  libdnnl-dev
)

# The tests, benchmarks and CI on top.
TEST_PACKAGES=(
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  # The ONNX tests run the ONNX checker and PyTorch's exporter with Debian's Python modules
  # (they skip without them)
  python3-onnx
  python3-torch
  # reads `soma train --csv` logs as a Keras user would (cli.train_csv_reads_like_keras_csvlogger)
  python3-pandas
  # the pinned oracle environment (scripts/oracles.sh) is a venv of Debian's python3
  python3-venv
  # the mpirun tests skip without it
  openmpi-bin
  # CI's sanitizer and fuzzing stage (scripts/ci-sanitize.sh): clang with libFuzzer and the
  # ASan/UBSan/TSan runtimes
  clang-14
  libclang-rt-14-dev
  lld
  # The API reference (`--target docs`) and its no-warnings test
  doxygen
  # cpack -G DEB (package_and_consume) reads the binaries' dependencies with it; a minimal
  # Debian has none
  file
)

PACKAGES=("${MAIN_PACKAGES[@]}")
[[ $PROFILE == main ]] || PACKAGES+=("${TEST_PACKAGES[@]}")

# The PyPI test oracles (onnx, onnxruntime, tensorboard with numpy, ml_dtypes, protobuf, ...):
# exactly the versions of scripts/oracles.lock, in their own virtual environment, never the
# user's python3. Without PyPI the tests that need them skip, saying so.
install_oracles() {
  [[ $PROFILE == main ]] && return 0
  bash "$ROOT/scripts/oracles.sh" ||
    echo "install-deps: no oracle environment; the tests that need it will skip" >&2
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed ($PROFILE)"
  install_oracles
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing ${missing[*]}; run as root (or install sudo)" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
install_oracles
