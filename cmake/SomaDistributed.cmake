# soma::dist over MPI (docs/distributed.md). Only src/dist sees the SOMA_HAS_MPI definition and
# only src/dist/mpi_*.cpp MPI's headers, so the rest of libsoma compiles identically with and
# without MPI; libsoma links the MPI libraries privately.
if(SOMA_HAS_MPI)
  file(GLOB SOMA_DIST_MPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/dist/mpi_*.cpp)
  set_property(SOURCE ${SOMA_DIST_MPI_SOURCES} APPEND PROPERTY INCLUDE_DIRECTORIES
               ${MPI_CXX_INCLUDE_DIRS})
  file(GLOB SOMA_DIST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/dist/*.cpp)
  set_property(SOURCE ${SOMA_DIST_SOURCES} APPEND PROPERTY COMPILE_DEFINITIONS SOMA_HAS_MPI)
  set_property(SOURCE ${SOMA_DIST_MPI_SOURCES} APPEND PROPERTY COMPILE_DEFINITIONS
               ${MPI_CXX_COMPILE_DEFINITIONS})
  target_link_libraries(soma PRIVATE ${MPI_CXX_LIBRARIES})
  if(MPI_CXX_LINK_FLAGS)
    target_link_options(soma PRIVATE ${MPI_CXX_LINK_FLAGS})
  endif()
endif()
