include(CMakePackageConfigHelpers)
# Keep the OpenMP OpenBLAS directory in the installed library's RUNPATH, so an installed libsoma
# loads that build even where the system's default libopenblas.so.0 is another one.
set_target_properties(soma PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS soma EXPORT somaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/soma DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT somaTargets NAMESPACE soma:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma)
configure_package_config_file(cmake/somaConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/somaConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/somaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/somaConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/somaConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/soma)
