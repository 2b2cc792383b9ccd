# install_move_consume (cmake -P; tests/install/CMakeLists.txt passes the -D
# values): installs the build tree with --strip into a fresh prefix, moves
# the prefix, and builds and runs the consumer against the moved copy, once
# through find_package(tidepool) and once through pkg-config, each on the
# sim the package names. Nothing may still point at the first prefix.
#
# In: BUILD_DIR LIBDIR VERSION CONSUMER_DIR WORK_ROOT GENERATOR MAKE_PROGRAM
#     CXX SANITIZE_FLAGS PKG_CONFIG
include("${CMAKE_CURRENT_LIST_DIR}/expect.cmake")

# A directory of its own, so that parallel runs never meet.
string(RANDOM LENGTH 10 ALPHABET "abcdefghijklmnopqrstuvwxyz0123456789" tag)
set(work "${WORK_ROOT}/install_move_consume.${tag}")
if(EXISTS "${work}")
  tp_fail("${work} exists already")
endif()
file(MAKE_DIRECTORY "${work}")
message(STATUS "working in ${work} (removed on success)")
set(stage "${work}/stage")
set(moved "${work}/moved/somewhere/else")

# --- install, stripped -------------------------------------------------------
tp_must("cmake --install --strip" COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${stage}" --strip)
file(REAL_PATH "${BUILD_DIR}/libtidepool.so" built_library)
file(REAL_PATH "${stage}/${LIBDIR}/libtidepool.so" installed_library)
file(SIZE "${built_library}" built_size)
file(SIZE "${installed_library}" installed_size)
message(STATUS "libtidepool.so: ${built_size} bytes built, ${installed_size} installed with --strip")
if(NOT installed_size LESS built_size)
  tp_fail("--strip left libtidepool.so at ${installed_size} bytes (built: ${built_size})")
endif()

# --- move it -----------------------------------------------------------------
file(MAKE_DIRECTORY "${work}/moved/somewhere")
file(RENAME "${stage}" "${moved}")
if(EXISTS "${stage}")
  tp_fail("the staged prefix is still there after the move")
endif()
set(moved_lib "${moved}/${LIBDIR}")
set(moved_sim "${moved_lib}/tidepool/sim/libcuda.so.1")
foreach(file "${moved_lib}/libtidepool.so" "${moved_sim}" "${moved}/include/tidepool/tidepool.h"
             "${moved_lib}/cmake/tidepool/tidepoolConfig.cmake" "${moved_lib}/pkgconfig/tidepool.pc")
  if(NOT EXISTS "${file}")
    tp_fail("not installed: ${file}")
  endif()
endforeach()

# Text files of the package must not name the prefix they were installed to.
file(GLOB_RECURSE package_files "${moved_lib}/cmake/tidepool/*" "${moved_lib}/pkgconfig/*")
foreach(file ${package_files})
  file(READ "${file}" text)
  tp_expect_lacks("${file} is relocatable" "${text}" "${stage}")
endforeach()

set(expected_stdout "version ${VERSION}\nmalloc ok\nwrite ok\nfree ok\nfree again invalid value\n")
set(clean_env --unset=TIDEPOOL_CONF --unset=LD_PRELOAD --unset=TIDEPOOL_CUDA_LIB --unset=LD_LIBRARY_PATH
              TIDEPOOL_SIM_MEMORY=1GiB)

# --- 1: find_package(tidepool CONFIG) ----------------------------------------
set(consumer_build "${work}/consumer-cmake")
tp_must("configure the consumer with find_package(tidepool)"
  COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
          "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release
          "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SANITIZE_FLAGS}"
          "-DCMAKE_PREFIX_PATH=${moved}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
tp_must("build the find_package consumer" COMMAND "${CMAKE_COMMAND}" --build "${consumer_build}")

file(STRINGS "${consumer_build}/package.txt" package_lines)
foreach(line ${package_lines})
  if(line MATCHES "^([A-Za-z_]+)=(.*)$")
    set(pkg_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
file(REAL_PATH "${moved_lib}/cmake/tidepool" expected_dir)
file(REAL_PATH "${pkg_tidepool_DIR}" found_dir)
if(NOT found_dir STREQUAL expected_dir)
  tp_fail("find_package found tidepool in '${pkg_tidepool_DIR}', not in the moved prefix")
endif()
if(NOT pkg_tidepool_VERSION STREQUAL VERSION)
  tp_fail("package version '${pkg_tidepool_VERSION}', expected '${VERSION}'")
endif()
foreach(name TIDEPOOL_SIM_DRIVER sim_target_file)
  if(NOT EXISTS "${pkg_${name}}")
    tp_fail("${name}='${pkg_${name}}' does not exist")
  endif()
  file(REAL_PATH "${pkg_${name}}" got)
  file(REAL_PATH "${moved_sim}" want)
  if(NOT got STREQUAL want)
    tp_fail("${name}='${pkg_${name}}' is not the moved sim '${moved_sim}'")
  endif()
endforeach()
file(REAL_PATH "${moved_lib}/libtidepool.so" moved_library)
foreach(name TIDEPOOL_PRELOAD_LIBRARY tidepool_target_file)
  if(NOT EXISTS "${pkg_${name}}")
    tp_fail("${name}='${pkg_${name}}' does not exist")
  endif()
  file(REAL_PATH "${pkg_${name}}" got)
  if(NOT got STREQUAL moved_library)
    tp_fail("${name}='${pkg_${name}}' is not the moved libtidepool.so")
  endif()
endforeach()
file(REAL_PATH "${pkg_TIDEPOOL_INCLUDE_DIR}" got)
file(REAL_PATH "${moved}/include" want)
if(NOT got STREQUAL want)
  tp_fail("TIDEPOOL_INCLUDE_DIR='${pkg_TIDEPOOL_INCLUDE_DIR}' is not the moved include directory")
endif()

# The build's RPATH finds the moved libtidepool.so; the package's variable
# finds the sim.
tp_must("run the find_package consumer on the sim"
  COMMAND "${CMAKE_COMMAND}" -E env ${clean_env} "TIDEPOOL_CUDA_LIB=${pkg_TIDEPOOL_SIM_DRIVER}"
          "${consumer_build}/consumer")
if(NOT tp_out STREQUAL expected_stdout)
  tp_fail("find_package consumer: stdout\n${tp_out}\nexpected\n${expected_stdout}\nstderr:\n${tp_err}")
endif()
message(STATUS "find_package consumer: ok")

# A driver that is not there: an error status and advice, never an abort.
# The advice names the sim of the prefix libtidepool.so was loaded from.
tp_expect_missing_driver("moved prefix, missing driver" "${consumer_build}/consumer"
  "${work}/no-driver/libcuda.so.1" "${moved_sim}"
  "${work}/no-driver/libcuda.so.1: cannot open shared object file: No such file or directory")

# --- 2: pkg-config -----------------------------------------------------------
set(pc_env "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${moved_lib}/pkgconfig" --unset=PKG_CONFIG_LIBDIR
           --unset=PKG_CONFIG_SYSROOT_DIR)
tp_must("pkg-config --modversion" COMMAND ${pc_env} "${PKG_CONFIG}" --modversion tidepool)
string(STRIP "${tp_out}" pc_version)
if(NOT pc_version STREQUAL VERSION)
  tp_fail("pkg-config --modversion says '${pc_version}', expected '${VERSION}'")
endif()
tp_must("pkg-config --cflags --libs" COMMAND ${pc_env} "${PKG_CONFIG}" --cflags --libs tidepool)
string(STRIP "${tp_out}" pc_flags)
message(STATUS "pkg-config --cflags --libs tidepool: ${pc_flags}")
tp_expect_contains("pkg-config flags name the moved prefix" "${pc_flags}" "${moved}")
tp_expect_lacks("pkg-config flags do not name the install prefix" "${pc_flags}" "${stage}")
foreach(variable simdriver preload)
  tp_must("pkg-config --variable=${variable}" COMMAND ${pc_env} "${PKG_CONFIG}" --variable=${variable} tidepool)
  string(STRIP "${tp_out}" pc_${variable})
  if(NOT EXISTS "${pc_${variable}}")
    tp_fail("pkg-config --variable=${variable} names '${pc_${variable}}', which does not exist")
  endif()
endforeach()
file(REAL_PATH "${pc_simdriver}" got)
file(REAL_PATH "${moved_sim}" want)
if(NOT got STREQUAL want)
  tp_fail("pkg-config --variable=simdriver is '${pc_simdriver}', not the moved sim")
endif()

separate_arguments(pc_args UNIX_COMMAND "${pc_flags}")
separate_arguments(san_args UNIX_COMMAND "${SANITIZE_FLAGS}")
tp_must("compile the consumer with pkg-config's flags"
  COMMAND "${CXX}" -std=c++17 ${san_args} "${CONSUMER_DIR}/consumer.cpp" ${pc_args} -o "${work}/consumer-pc")
# This time no TIDEPOOL_CUDA_LIB: the sim's directory on LD_LIBRARY_PATH
# makes it the libcuda.so.1 that tidepool opens.
tp_must("run the pkg-config consumer on the sim"
  COMMAND "${CMAKE_COMMAND}" -E env ${clean_env} "LD_LIBRARY_PATH=${moved_lib}:${moved_lib}/tidepool/sim"
          "${work}/consumer-pc")
if(NOT tp_out STREQUAL expected_stdout)
  tp_fail("pkg-config consumer: stdout\n${tp_out}\nexpected\n${expected_stdout}\nstderr:\n${tp_err}")
endif()
message(STATUS "pkg-config consumer: ok")

file(REMOVE_RECURSE "${work}")
