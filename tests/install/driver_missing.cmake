# driver_missing_is_an_error_not_an_abort (cmake -P; tests/install/CMakeLists.txt
# passes the -D values): the in-tree consumer, linked to the build's
# libtidepool.so, runs with TIDEPOOL_CUDA_LIB naming a file that is absent
# and one that is no library. tidepool_malloc must answer "not initialized"
# (no abort, no signal), and stderr must carry dlerror()'s text and the way
# out: the build's own sim, found beside libtidepool.so.
#
# In: CONSUMER SIM VERSION WORK_ROOT
include("${CMAKE_CURRENT_LIST_DIR}/expect.cmake")

string(RANDOM LENGTH 10 ALPHABET "abcdefghijklmnopqrstuvwxyz0123456789" tag)
set(work "${WORK_ROOT}/driver_missing.${tag}")
file(MAKE_DIRECTORY "${work}")

tp_expect_missing_driver("absent driver" "${CONSUMER}" "${work}/absent/libcuda.so.1" "${SIM}"
  "${work}/absent/libcuda.so.1: cannot open shared object file: No such file or directory")

# Long enough that the loader reads a whole ELF header and rejects it.
string(REPEAT "not a shared library\n" 8 text)
file(WRITE "${work}/libcuda.so.1" "${text}")
tp_expect_missing_driver("not a library" "${CONSUMER}" "${work}/libcuda.so.1" "${SIM}"
  "${work}/libcuda.so.1: invalid ELF header")

file(REMOVE_RECURSE "${work}")
