# Installs the library, its public headers and a CMake package so that an outside project can
#   find_package(wallfacer REQUIRED)
#   target_link_libraries(app PRIVATE wallfacer::wallfacer)
include(CMakePackageConfigHelpers)

set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set_target_properties(wallfacer_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS wallfacer EXPORT wallfacerTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS wallfacer_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/wallfacer DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/wallfacer/build_info.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wallfacer)

set(WF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/wallfacer)
install(EXPORT wallfacerTargets NAMESPACE wallfacer:: DESTINATION ${WF_CMAKE_DIR})
configure_package_config_file(scripts/cmake/wallfacerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/wallfacerConfig.cmake INSTALL_DESTINATION ${WF_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wallfacerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wallfacerConfig.cmake
              ${PROJECT_BINARY_DIR}/wallfacerConfigVersion.cmake
        DESTINATION ${WF_CMAKE_DIR})
