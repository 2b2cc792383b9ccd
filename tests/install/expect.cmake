# Helpers shared by the tests/install scripts (cmake -P): run a command and
# check its exit code and output. Every failure names what was run and shows
# both streams.

# tp_run(<out-prefix> COMMAND ...): runs it, sets <out-prefix>_rc, _out, _err.
function(tp_run prefix)
  cmake_parse_arguments(ARG "" "" "COMMAND" ${ARGN})
  execute_process(COMMAND ${ARG_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${prefix}_rc "${rc}" PARENT_SCOPE)
  set(${prefix}_out "${out}" PARENT_SCOPE)
  set(${prefix}_err "${err}" PARENT_SCOPE)
  set(${prefix}_cmd "${ARG_COMMAND}" PARENT_SCOPE)
endfunction()

function(tp_fail what)
  message(FATAL_ERROR "FAIL: ${what}")
endfunction()

# tp_must(<what> COMMAND ...): runs it and fails unless it exits 0; sets
# tp_out and tp_err.
function(tp_must what)
  tp_run(r ${ARGN})
  if(NOT r_rc STREQUAL "0")
    tp_fail("${what}: exit ${r_rc}\n  command: ${r_cmd}\n  stdout:\n${r_out}\n  stderr:\n${r_err}")
  endif()
  set(tp_out "${r_out}" PARENT_SCOPE)
  set(tp_err "${r_err}" PARENT_SCOPE)
endfunction()

function(tp_expect_contains what haystack needle)
  string(FIND "${haystack}" "${needle}" at)
  if(at EQUAL -1)
    tp_fail("${what}: expected to find\n  ${needle}\nin\n${haystack}")
  endif()
endfunction()

function(tp_expect_lacks what haystack needle)
  string(FIND "${haystack}" "${needle}" at)
  if(NOT at EQUAL -1)
    tp_fail("${what}: did not expect\n  ${needle}\nin\n${haystack}")
  endif()
endfunction()

# tp_expect_missing_driver(<label> <consumer> <missing-path> <sim-hint> [ENV...]):
# runs the consumer with TIDEPOOL_CUDA_LIB=<missing-path> (a file that is
# absent, or not a library) and checks that tidepool_malloc answers "not
# initialized" (exit 3, never a signal), that stderr carries dlerror()'s text
# and the advice naming <sim-hint>, and that stdout holds only the consumer's
# own lines.
function(tp_expect_missing_driver label consumer missing hint dlerror_text)
  tp_run(r COMMAND "${CMAKE_COMMAND}" -E env --unset=TIDEPOOL_CONF --unset=LD_PRELOAD
         "TIDEPOOL_CUDA_LIB=${missing}" ${ARGN} "${consumer}")
  set(shown "\n  command: ${r_cmd}\n  stdout:\n${r_out}\n  stderr:\n${r_err}")
  if(NOT r_rc STREQUAL "3")
    tp_fail("${label}: expected exit 3 (tidepool_malloc refused), got '${r_rc}'${shown}")
  endif()
  if(NOT r_out STREQUAL "version ${VERSION}\nmalloc not initialized\ncuMemAlloc_v2 3\n")
    tp_fail("${label}: unexpected stdout${shown}")
  endif()
  tp_expect_contains("${label}: stderr has dlerror()'s text" "${r_err}" "${dlerror_text}")
  tp_expect_contains("${label}: stderr names what to do" "${r_err}" "install the NVIDIA driver")
  tp_expect_contains("${label}: stderr names the sim" "${r_err}" "TIDEPOOL_CUDA_LIB=${hint}")
  tp_expect_contains("${label}: stderr names tidepool-run --sim" "${r_err}" "tidepool-run --sim")
  message(STATUS "${label}: ok")
endfunction()
