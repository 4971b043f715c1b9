# The part boundaries of src/: a part may include its own headers and those of the parts below
# it (the ones it links, transitively), never a part above it. tp_check_includes runs when
# CMake configures each part; the same check runs as a CTest test (part_boundaries) from the
# graph written to the build directory, so an upward include fails the build's configure step
# and the test suite.
#   cmake -DSRC=<repo>/src -DGRAPH=<build>/part_graph.cmake -P cmake/check_includes.cmake

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.20)  # IN_LIST
endif()

# Fails naming every file of src/DIR that includes a part outside ALLOWED (a list of dirs).
function(tp_check_includes src dir allowed)
  file(GLOB part_dirs LIST_DIRECTORIES true RELATIVE ${src} ${src}/*)
  file(GLOB_RECURSE files ${src}/${dir}/*.h ${src}/${dir}/*.cpp ${src}/${dir}/*.cu)
  set(bad "")
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^#include \"[a-z_]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" target "${line}")
      if(IS_DIRECTORY ${src}/${target} AND NOT target IN_LIST allowed)
        file(RELATIVE_PATH rel ${src} ${f})
        string(APPEND bad "\n  src/${rel}: ${line} (part '${dir}' may include only: ${allowed})")
      endif()
    endforeach()
  endforeach()
  if(bad)
    message(FATAL_ERROR "upward includes across part boundaries (docs/ARCHITECTURE.md):${bad}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  include(${GRAPH})  # sets TP_PARTS and TP_ALLOWED_<dir> for each
  foreach(dir ${TP_PARTS})
    tp_check_includes(${SRC} ${dir} "${TP_ALLOWED_${dir}}")
  endforeach()
  message(STATUS "part boundaries hold for: ${TP_PARTS}")
endif()
