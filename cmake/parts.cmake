include(${CMAKE_CURRENT_LIST_DIR}/check_includes.cmake)

# tp_add_part(NAME DIR DEPS...): a static library from every .cpp under src/DIR (CUDA and
# backend folders excluded; their parts add them explicitly). Its files may include only the
# parts among DEPS, transitively (checked here and by the part_boundaries test).
function(tp_add_part name dir)
  set(allowed ${dir})
  foreach(dep ${ARGN})
    get_property(dep_allowed GLOBAL PROPERTY TP_PART_ALLOWED_${dep})
    list(APPEND allowed ${dep_allowed})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY TP_PART_ALLOWED_${name} ${allowed})
  set_property(GLOBAL APPEND PROPERTY TP_PARTS ${dir})
  set_property(GLOBAL PROPERTY TP_ALLOWED_DIR_${dir} ${allowed})
  tp_check_includes(${PROJECT_SOURCE_DIR}/src ${dir} "${allowed}")
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${dir}/*.cpp)
  list(FILTER srcs EXCLUDE REGEX "/(cuda|mpi|nccl)/")
  if(NOT srcs)  # a part not written yet: headers only
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} INTERFACE ${ARGN})
    return()
  endif()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARGN} PRIVATE tensorpar_warnings)
endfunction()

# tp_add_test_part(NAME DIR DEPS...): one GoogleTest binary per test folder; every test gets a
# ctest timeout so nothing can hang the suite.
function(tp_add_test_part name dir)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${dir}/*_test.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(${name} ${srcs})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARGN} tp_test_fixtures GTest::gtest_main tensorpar_warnings)
  # The binaries in TP_TSAN_TESTS (tests/CMakeLists.txt) are labelled "tsan": the subset the tsan
  # preset runs. (One label: gtest_discover_tests passes properties through a space-joined list.)
  if(${name} IN_LIST TP_TSAN_TESTS)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300 LABELS tsan)
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
  endif()
endfunction()

# Writes the part graph for the part_boundaries test (call after every tp_add_part).
function(tp_write_part_graph file)
  get_property(parts GLOBAL PROPERTY TP_PARTS)
  set(text "set(TP_PARTS ${parts})\n")
  foreach(dir ${parts})
    get_property(allowed GLOBAL PROPERTY TP_ALLOWED_DIR_${dir})
    string(APPEND text "set(TP_ALLOWED_${dir} ${allowed})\n")
  endforeach()
  file(WRITE ${file} "${text}")
endfunction()
