#!/usr/bin/env bash
# Installs what soma needs to build and test on Debian 12. Idempotent: when every package is
# already installed it only asks dpkg and returns (no apt-get update, no network).
set -euo pipefail

# OpenBLAS must be the OpenMP build (libopenblas-openmp-dev, not -pthread-dev) so that BLAS and
# soma's own loops share one thread pool.
PACKAGES=(
  build-essential
  cmake
  ninja-build
  ccache
  pkg-config
  libopenblas-openmp-dev
  # LAPACK's C interface for soma::linalg (over OpenBLAS's LAPACK)
  liblapacke-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  protobuf-compiler
  libprotobuf-dev
  zlib1g-dev
  libpng-dev
  nlohmann-json3-dev
  # Keras .weights.h5 / .h5 weight files (optional at build time; docs/keras.md)
  libhdf5-dev
  dataset-fashion-mnist
  # ONNX export/import (libonnx-dev); its tests run the ONNX checker and PyTorch's exporter
  # with Debian's Python modules (they skip without them)
  libonnx-dev
  python3-onnx
  python3-torch
  # reads `soma train --csv` logs as a Keras user would (cli.train_csv_reads_like_keras_csvlogger)
  python3-pandas
  # Distributed training over MPI; the mpirun tests skip without openmpi-bin
  libopenmpi-dev
  openmpi-bin
  # oneDNN: convolution primitives and bf16 matrix work on the CPU (optional at build time)
  libdnnl-dev
  # CI's sanitizer and fuzzing stage (scripts/ci-sanitize.sh): clang with libFuzzer and the
  # ASan/UBSan/TSan runtimes
  clang-14
  libclang-rt-14-dev
  lld
  # The API reference (`--target docs`) and its no-warnings test
  doxygen
)

# The ONNX conformance suite (tests/unit/test_onnx_node_conformance.cpp) runs the backend node
# tests of the onnx package on PATH's python3: PyPI's newest wheel, installed once (the suite
# skips where PyPI cannot be reached and no onnx is installed). Pinned, so that a new onnx
# release cannot turn CI red overnight: tests/onnx/node_expected.txt was made with this one
# (SOMA_ONNX_VERSION picks another).
install_onnx_wheel() {
  command -v python3 >/dev/null 2>&1 || return 0
  if ! python3 -c "import onnx" >/dev/null 2>&1; then
    echo "install-deps: pip install onnx (for the ONNX node-test suite)"
    timeout 300 python3 -m pip install --quiet "onnx==${SOMA_ONNX_VERSION:-1.23.2}" ||
      echo "install-deps: could not install onnx from PyPI; the ONNX node-test suite will skip" >&2
  fi
  # onnxruntime runs soma's ONNX exports (test_onnx_export_ort); a test oracle only.
  if ! python3 -c "import onnxruntime" >/dev/null 2>&1; then
    echo "install-deps: pip install onnxruntime (runs soma's ONNX exports in test_onnx_export_ort)"
    timeout 300 python3 -m pip install --quiet "onnxruntime==${SOMA_ONNXRUNTIME_VERSION:-1.32.0}" ||
      echo "install-deps: could not install onnxruntime from PyPI; test_onnx_export_ort will skip" >&2
  fi
  # TensorBoard's own reader checks soma's event files (test_tensorboard); a test oracle only.
  if ! python3 -c "import tensorboard" >/dev/null 2>&1; then
    echo "install-deps: pip install tensorboard (test oracle for the event files)"
    timeout 300 python3 -m pip install --quiet "tensorboard==${SOMA_TENSORBOARD_VERSION:-2.21.0}" ||
      echo "install-deps: could not install tensorboard from PyPI; its test will skip" >&2
  fi
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  install_onnx_wheel
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
install_onnx_wheel
