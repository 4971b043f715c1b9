# tp_add_part(NAME DIR DEPS...): a static library from every .cpp under src/DIR (CUDA and
# backend folders excluded; their parts add them explicitly).
function(tp_add_part name dir)
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
  target_link_libraries(${name} PRIVATE ${ARGN} GTest::gtest_main tensorpar_warnings)
  target_compile_definitions(${name} PRIVATE TP_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
endfunction()
