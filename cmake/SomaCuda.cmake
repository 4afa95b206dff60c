# The CUDA backend. With SOMA_ENABLE_CUDA (default ON) it is built whenever nvcc is found
# (CMAKE_CUDA_COMPILER / CUDACXX, then PATH, then /usr/local/cuda/bin/nvcc); no GPU is needed to
# build it. Sets SOMA_HAS_CUDA and defines soma_configure_cuda_target(target).
#
# The .cu files (kernels) go into an object library compiled by nvcc; the host-side .cpp files in
# src/backend/cuda are ordinary libsoma sources compiled by the C++ compiler against the CUDA
# runtime headers, so that libsoma's C++ flags (-march=native, -Wall) never reach nvcc.
set(SOMA_HAS_CUDA OFF)
if(SOMA_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(SOMA_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(SOMA_NVCC)
      set(CMAKE_CUDA_COMPILER "${SOMA_NVCC}" CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 machine code plus compute_90 PTX, which newer GPUs JIT-compile.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cudart)
      set(SOMA_HAS_CUDA ON)
      message(STATUS "soma: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                     "architectures ${CMAKE_CUDA_ARCHITECTURES})")
    else()
      message(STATUS "soma: nvcc found but the CUDA toolkit (cudart, cuBLAS) is not; CUDA backend OFF")
    endif()
  else()
    message(STATUS "soma: nvcc not found; CUDA backend OFF (CPU only)")
  endif()
else()
  message(STATUS "soma: CUDA backend disabled (SOMA_ENABLE_CUDA=OFF)")
endif()

function(soma_configure_cuda_target target)
  if(NOT SOMA_HAS_CUDA)
    return()
  endif()
  file(GLOB _soma_cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu)
  add_library(soma_cuda_kernels OBJECT ${_soma_cu})
  # C++17 for the kernels: CMake before 3.26 has no C++20 dialect for nvcc, and the kernels'
  # interface (launch.hpp) needs none of it. (CUDA_STANDARD defaults to CXX_STANDARD, 20 here.)
  set_target_properties(soma_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  set_target_properties(soma_cuda_kernels PROPERTIES CUDA_EXTENSIONS OFF
    POSITION_INDEPENDENT_CODE ON CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  target_include_directories(soma_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(soma_cuda_kernels PRIVATE SOMA_HAS_CUDA=1)
  # Lambdas in kernels' launch helpers; quiet the host compiler's warnings from CUDA headers.
  target_compile_options(soma_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda -Xcompiler=-Wall>)
  target_link_libraries(soma_cuda_kernels PRIVATE CUDA::cudart)
  if(CCACHE_PROGRAM)
    set_target_properties(soma_cuda_kernels PROPERTIES CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:soma_cuda_kernels>)
  # Only the files that look at it get SOMA_HAS_CUDA, so every other source compiles exactly as
  # in a CPU-only build (and shares its ccache entries).
  file(GLOB _soma_cuda_host CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
  set_property(SOURCE ${_soma_cuda_host} ${PROJECT_SOURCE_DIR}/src/core/device_backend.cpp
               ${PROJECT_SOURCE_DIR}/src/ops/registry.cpp
               APPEND PROPERTY COMPILE_DEFINITIONS SOMA_HAS_CUDA=1)
  # cuBLAS is opened with dlopen on first use (src/backend/cuda/cublas_loader.cpp): linking it
  # would cost every process ~100 ms of start-up to map libcublas + libcublasLt.
  get_target_property(_soma_cublas CUDA::cublas IMPORTED_LOCATION)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/cublas_loader.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS "SOMA_CUBLAS_SONAME=\"libcublas.so.${CUDAToolkit_VERSION_MAJOR}\""
               "SOMA_CUBLAS_PATH=\"${_soma_cublas}\"")
  # cuBLASLt (dense_bias_act's GEMM + epilogue, src/backend/cuda/cublaslt_loader.cpp): dlopen too.
  set(_soma_cublaslt "")
  if(TARGET CUDA::cublasLt)
    get_target_property(_soma_cublaslt CUDA::cublasLt IMPORTED_LOCATION)
  endif()
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/cublaslt_loader.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS "SOMA_CUBLASLT_SONAME=\"libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}\""
               "SOMA_CUBLASLT_PATH=\"${_soma_cublaslt}\"")
  # cuDNN (convolutions, src/backend/cuda/conv.cpp; fused attention, attention_cudnn.cpp): its headers at build time, the library
  # opened with dlopen on first use like cuBLAS (cudnn_loader.cpp); never linked. Without the
  # headers the backend still builds and its convolutions report why they are unavailable.
  find_path(SOMA_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(SOMA_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(SOMA_CUDNN_INCLUDE_DIR)
    file(STRINGS ${SOMA_CUDNN_INCLUDE_DIR}/cudnn_version.h _soma_cudnn_major
         REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" _soma_cudnn_major
           "${_soma_cudnn_major}")
    message(STATUS "soma: cuDNN ${_soma_cudnn_major} headers in ${SOMA_CUDNN_INCLUDE_DIR} "
                   "(the library is opened at run time)")
    target_include_directories(${target} PRIVATE ${SOMA_CUDNN_INCLUDE_DIR})
    set(_soma_cudnn_path "")
    if(SOMA_CUDNN_LIBRARY)
      set(_soma_cudnn_path "${SOMA_CUDNN_LIBRARY}")
    endif()
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/conv.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/attention_cudnn.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/cudnn_loader.cpp
                 APPEND PROPERTY COMPILE_DEFINITIONS SOMA_HAS_CUDNN_HEADERS=1)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/cudnn_loader.cpp APPEND PROPERTY
                 COMPILE_DEFINITIONS "SOMA_CUDNN_SONAME=\"libcudnn.so.${_soma_cudnn_major}\""
                 "SOMA_CUDNN_PATH=\"${_soma_cudnn_path}\"")
  else()
    message(STATUS "soma: cudnn.h not found; CUDA convolutions unavailable")
  endif()
  target_link_libraries(${target} PRIVATE CUDA::cudart ${CMAKE_DL_LIBS})
endfunction()
