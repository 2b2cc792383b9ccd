# Installs libtidepool.so, headers, tools, the sim driver, a CMake package for
# find_package(tidepool) and a pkg-config file.
include(CMakePackageConfigHelpers)

install(DIRECTORY include/tidepool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

if(TARGET tidepool)
  install(TARGETS tidepool EXPORT tidepoolTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT tidepoolTargets NAMESPACE tidepool::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tidepool)
endif()

configure_package_config_file(cmake/tidepoolConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tidepool)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tidepool)

configure_file(cmake/tidepool.pc.in "${CMAKE_CURRENT_BINARY_DIR}/tidepool.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tidepool.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
