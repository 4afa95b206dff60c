include(CMakePackageConfigHelpers)
# Three install components, which are also the three Debian packages `cpack -G DEB` makes:
#   libsoma      the shared library (what a program that uses soma needs at run time)
#   libsoma-dev  headers, the libsoma.so link, the CMake package and soma.pc
#   soma         the command-line tool
# Keep the OpenMP OpenBLAS directory in the installed library's RUNPATH, so an installed libsoma
# loads that build even where the system's default libopenblas.so.0 is another one.
set_target_properties(soma PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS soma EXPORT somaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libsoma NAMELINK_COMPONENT libsoma-dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libsoma-dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT libsoma
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/soma DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT libsoma-dev)
install(EXPORT somaTargets NAMESPACE soma:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma
  COMPONENT libsoma-dev)
configure_package_config_file(cmake/somaConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/somaConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma)
# While soma is 0.x every minor version may break the ABI (the soname is libsoma.so.0.1), so a
# request for 0.1 accepts 0.1.x only; from 1.0 on, the same major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_soma_compat SameMinorVersion)
else()
  set(_soma_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/somaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_soma_compat})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/somaConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/somaConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma COMPONENT libsoma-dev)

# pkg-config: prefix is found from the .pc file's own place, so an unpacked package (dpkg -x)
# or a moved prefix works as well as /usr.
set(_soma_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH _soma_pc_to_prefix /${_soma_pc_dir} /)
string(REGEX REPLACE "/$" "" _soma_pc_to_prefix "${_soma_pc_to_prefix}")
set(SOMA_PC_PRIVATE_LIBS "")
if(NOT BUILD_SHARED_LIBS)
  set(SOMA_PC_PRIVATE_LIBS "-lpng -lz -lgomp -lpthread")
endif()
configure_file(cmake/soma.pc.in ${CMAKE_CURRENT_BINARY_DIR}/soma.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/soma.pc DESTINATION ${_soma_pc_dir} COMPONENT libsoma-dev)

# cpack -G DEB: libsoma, libsoma-dev and soma packages (scripts/package-check.sh builds them,
# unpacks them into an empty root and builds tests/consumer against that with CMake and with
# pkg-config).
set(CPACK_PACKAGE_NAME soma)
set(CPACK_PACKAGE_VENDOR "the soma developers")
set(CPACK_PACKAGE_CONTACT "soma developers <soma@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "soma: a C++ deep-learning framework")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL libsoma libsoma-dev soma)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The soma command needs libsoma from its sibling package: let dpkg-shlibdeps see the built one
# (the dependency itself comes from CPACK_COMPONENT_SOMA_DEPENDS).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_LIBSOMA_PACKAGE_NAME libsoma)
set(CPACK_DEBIAN_LIBSOMA_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIBSOMA-DEV_PACKAGE_NAME libsoma-dev)
set(CPACK_DEBIAN_LIBSOMA-DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_SOMA_PACKAGE_NAME soma)
set(CPACK_COMPONENT_LIBSOMA_DESCRIPTION "soma deep-learning library (shared library)")
set(CPACK_COMPONENT_LIBSOMA-DEV_DESCRIPTION "soma deep-learning library (headers, CMake and pkg-config files)")
set(CPACK_COMPONENT_SOMA_DESCRIPTION "soma command-line tool: train, evaluate, predict, export")
set(CPACK_COMPONENT_LIBSOMA-DEV_DEPENDS libsoma)
set(CPACK_COMPONENT_SOMA_DEPENDS libsoma)
include(CPack)
