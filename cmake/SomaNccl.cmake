# NCCL for soma::dist (docs/distributed.md, "NCCL"): src/dist/nccl_communicator.cpp runs the
# collectives on CUDA tensors, one process per GPU. Built when NCCL is found under the CUDA
# toolkit (nccl.h, libnccl.so). Several ranks need MPI too (it starts the job and carries NCCL's
# unique id); without MPI, NCCL serves one process (a 1-rank communicator: GPU machines whose
# image has NCCL but no MPI still check it, issue 24); plain C++
# against the CUDA runtime API, so nvcc is not needed. No GPU is needed to build it: at run time
# soma asks for NCCL only when tensors are on a GPU. Sets SOMA_HAS_NCCL and defines
# soma_configure_nccl_target(target).
option(SOMA_ENABLE_NCCL "Build the NCCL communicator when the CUDA toolkit and NCCL are found" ON)
set(SOMA_HAS_NCCL OFF)
if(SOMA_ENABLE_NCCL)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
    find_path(SOMA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
    find_library(SOMA_NCCL_LIBRARY nccl
                 HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib $ENV{NCCL_HOME}/lib64)
    if(SOMA_NCCL_INCLUDE_DIR AND SOMA_NCCL_LIBRARY)
      set(SOMA_HAS_NCCL ON)
      message(STATUS "soma: NCCL ${SOMA_NCCL_LIBRARY}: distributed training on GPUs on")
    else()
      message(STATUS "soma: NCCL not found under the CUDA toolkit; soma::dist is MPI (CPU) only")
    endif()
  else()
    message(STATUS "soma: CUDA toolkit not found; soma::dist is MPI (CPU) only, no NCCL")
  endif()
endif()

function(soma_configure_nccl_target target)
  if(NOT SOMA_HAS_NCCL)
    return()
  endif()
  # Only src/dist sees SOMA_HAS_NCCL, and only the NCCL communicator nccl.h.
  file(GLOB _soma_dist_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/dist/*.cpp)
  set_property(SOURCE ${_soma_dist_sources} APPEND PROPERTY COMPILE_DEFINITIONS SOMA_HAS_NCCL)
  file(GLOB _soma_nccl_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/dist/nccl_*.cpp)
  set_property(SOURCE ${_soma_nccl_sources} APPEND PROPERTY INCLUDE_DIRECTORIES
               ${SOMA_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE CUDA::cudart ${SOMA_NCCL_LIBRARY})
endfunction()
