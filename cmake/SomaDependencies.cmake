# OpenMP for the intra-op pool and OpenBLAS built on OpenMP (Debian: libopenblas-openmp-dev), so
# that BLAS and soma's own loops share one pool instead of two competing ones.
find_package(OpenMP REQUIRED)

set(_soma_blas_hint /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_library(SOMA_BLAS_LIBRARY NAMES openblas PATHS ${_soma_blas_hint} NO_DEFAULT_PATH)
find_path(SOMA_BLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(NOT SOMA_BLAS_LIBRARY OR NOT SOMA_BLAS_INCLUDE_DIR)
  message(FATAL_ERROR "soma needs OpenBLAS built with OpenMP: apt-get install libopenblas-openmp-dev "
                      "(or run scripts/install-deps.sh)")
endif()
message(STATUS "soma: BLAS ${SOMA_BLAS_LIBRARY}")

# LAPACKE (Debian: liblapacke-dev), LAPACK's C interface, for soma::linalg's solve, inv, det,
# cholesky, qr, svd and eigh (src/backend/cpu/lapack.cpp); underneath it runs the LAPACK that
# OpenBLAS provides (Debian's liblapack.so.3 alternative). Private: no public header mentions it.
find_path(SOMA_LAPACKE_INCLUDE_DIR lapacke.h)
find_library(SOMA_LAPACKE_LIBRARY NAMES lapacke)
if(NOT SOMA_LAPACKE_LIBRARY OR NOT SOMA_LAPACKE_INCLUDE_DIR)
  message(FATAL_ERROR "soma needs LAPACKE for soma::linalg (solve, inv, det, cholesky, qr, svd, "
                      "eigh): apt-get install liblapacke-dev (or run scripts/install-deps.sh)")
endif()
message(STATUS "soma: LAPACKE ${SOMA_LAPACKE_LIBRARY}")

# zlib reads the gzip-compressed IDX files (MNIST, Fashion-MNIST) directly.
find_package(ZLIB)
if(NOT ZLIB_FOUND)
  message(FATAL_ERROR "soma needs zlib: apt-get install zlib1g-dev (or run scripts/install-deps.sh)")
endif()

# libpng decodes and encodes PNG images (soma::image, `soma predict`).
find_package(PNG)
if(NOT PNG_FOUND)
  message(FATAL_ERROR "soma needs libpng: apt-get install libpng-dev (or run scripts/install-deps.sh)")
endif()

# nlohmann/json (header-only) reads and writes the model config inside model files; it is used
# only in src/, never in public headers.
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "soma needs nlohmann/json: apt-get install nlohmann-json3-dev (or run scripts/install-deps.sh)")
endif()

# MPI (Debian: libopenmpi-dev) for data-parallel training (src/dist, docs/distributed.md). Optional:
# without it libsoma still builds, and soma::dist runs as a single process (world size 1).
option(SOMA_ENABLE_MPI "Build the MPI communicator (soma::dist) when MPI is found" ON)
set(SOMA_HAS_MPI OFF)
if(SOMA_ENABLE_MPI)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(SOMA_HAS_MPI ON)
    message(STATUS "soma: MPI ${MPI_CXX_VERSION} (${MPIEXEC_EXECUTABLE}): distributed training on")
  else()
    message(STATUS "soma: MPI not found; soma::dist runs single-process (apt-get install libopenmpi-dev)")
  endif()
endif()
