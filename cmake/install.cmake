# Installs libtidepool.so, headers, tools, the sim driver, a CMake package for
# find_package(tidepool) and a pkg-config file. Both packages find everything
# relative to their own location, so an installed prefix can be moved
# (tests/install checks it). See docs/packaging.md.
include(CMakePackageConfigHelpers)

set(tidepool_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/tidepool")
set(tidepool_pkgconfig_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

install(DIRECTORY include/tidepool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(TARGETS tidepool EXPORT tidepoolTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tidepoolTargets NAMESPACE tidepool:: DESTINATION ${tidepool_cmake_dir})
# tidepool::sim, in a file of its own: the config includes it only when the
# sim was installed (a distribution may leave the sim out, or ship it apart).
install(EXPORT tidepoolSimTargets NAMESPACE tidepool:: DESTINATION ${tidepool_cmake_dir})

# Install-relative paths the config turns into absolute ones from its own
# location (configure_package_config_file's PATH_VARS).
set(TIDEPOOL_INSTALL_PRELOAD "${CMAKE_INSTALL_LIBDIR}/libtidepool.so")
set(TIDEPOOL_INSTALL_SIM "${CMAKE_INSTALL_LIBDIR}/tidepool/sim/libcuda.so.1")
set(TIDEPOOL_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
configure_package_config_file(cmake/tidepoolConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfig.cmake"
  INSTALL_DESTINATION ${tidepool_cmake_dir}
  PATH_VARS TIDEPOOL_INSTALL_PRELOAD TIDEPOOL_INSTALL_SIM TIDEPOOL_INSTALL_INCLUDEDIR)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/tidepoolConfigVersion.cmake"
        DESTINATION ${tidepool_cmake_dir})

# pkg-config: prefix=${pcfiledir}/<as many ../ as the .pc file is deep>, so
# the file names the prefix it sits in, not the one configured. An absolute
# libdir or includedir cannot move; those keep the configured paths.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TIDEPOOL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TIDEPOOL_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(TIDEPOOL_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH tidepool_pc_up "/tidepool-prefix/${tidepool_pkgconfig_dir}" "/tidepool-prefix")
  string(REGEX REPLACE "/$" "" tidepool_pc_up "${tidepool_pc_up}")  # "../.." for lib/pkgconfig
  set(TIDEPOOL_PC_PREFIX "\${pcfiledir}/${tidepool_pc_up}")
  set(TIDEPOOL_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(TIDEPOOL_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/tidepool.pc.in "${CMAKE_CURRENT_BINARY_DIR}/tidepool.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tidepool.pc" DESTINATION ${tidepool_pkgconfig_dir})
