# The layers of src/, bottom to top (src/README.md). Each is an object
# library compiled against a view of src/ that holds only itself and the
# layers below it, so an include of a layer above does not compile:
# build/<preset>/layers/<layer>/ has one symbolic link per visible layer.
# tidepool_core gathers every layer's objects; the fronts (capi, interpose,
# tools, bench) and the tests see all of src/ through it.
#
# tidepool_layer(NAME [BELOW LAYER...]) in src/NAME/CMakeLists.txt makes the
# target tidepool_NAME from every .cpp of the folder and its subfolders.

# The view of src/ for `name` seeing `visible`; its path in `out`.
function(tidepool_layer_view name out)
  set(view "${PROJECT_BINARY_DIR}/layers/${name}")
  file(MAKE_DIRECTORY "${view}")
  # Links only: a layer dropped from the list must not stay visible. (REMOVE
  # unlinks a link; it never follows one into src/.)
  file(GLOB stale LIST_DIRECTORIES true "${view}/*")
  if(stale)
    file(REMOVE ${stale})
  endif()
  foreach(layer IN LISTS ARGN)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${layer}" "${view}/${layer}" SYMBOLIC)
  endforeach()
  set(${out} "${view}" PARENT_SCOPE)
endfunction()

function(tidepool_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "BELOW")
  tidepool_layer_view(${name} view ${arg_BELOW} ${name})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/${name}/*.cpp")
  add_library(tidepool_${name} OBJECT ${sources})
  target_include_directories(tidepool_${name} PRIVATE "${view}")
  target_link_libraries(tidepool_${name} PRIVATE tidepool_cuda_headers tidepool_logging_deps tidepool_zlib_headers
    nlohmann_json::nlohmann_json Threads::Threads)
  target_sources(tidepool_core PRIVATE $<TARGET_OBJECTS:tidepool_${name}>)
  set_property(GLOBAL APPEND PROPERTY TIDEPOOL_LAYERS ${name})
  set_property(GLOBAL PROPERTY TIDEPOOL_LAYER_${name}_BELOW ${arg_BELOW})
endfunction()
