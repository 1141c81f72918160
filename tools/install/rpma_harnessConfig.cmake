# CMake package for rpma-harness (installed by `tools/harness install PREFIX`).
#
#   find_package(rpma_harness REQUIRED)   # with -DCMAKE_PREFIX_PATH=PREFIX
#   target_link_libraries(app PRIVATE rpma_harness::rpma)          # C API
#   target_link_libraries(app_test PRIVATE rpma_harness::testing
#                                          rpma_harness::gtest_main)
#   add_test(NAME s COMMAND ${RPMA_HARNESS_SCENARIO} my.yaml --quiet)
#
# Targets:
#   rpma_harness::rpma        <librpma.h> (librpma 1.3 API), FakeNic,
#                             FaultInjector, ScopedBackend (static)
#   rpma_harness::testing     matchers, ConnectedPair, MockVerbsBackend;
#                             needs GoogleTest's CMake package; C++17
#   rpma_harness::gtest_main  main() with the flight recorder
#   rpma_harness::librpma     the drop-in shared librpma.so.0, if installed
# Variables: RPMA_HARNESS_SCENARIO (the scenario runner), and
# rpma_harness_HAS_DROPIN.

include(CMakeFindDependencyMacro)
find_dependency(Threads)

get_filename_component(_rpma_harness_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(_rpma_harness_lib "${_rpma_harness_prefix}/lib")
set(_rpma_harness_inc "${_rpma_harness_prefix}/include/rpma-harness")

find_library(RPMA_HARNESS_IBVERBS_LIBRARY ibverbs)
find_library(RPMA_HARNESS_RDMACM_LIBRARY rdmacm)
if(NOT RPMA_HARNESS_IBVERBS_LIBRARY OR NOT RPMA_HARNESS_RDMACM_LIBRARY)
  set(rpma_harness_FOUND FALSE)
  set(rpma_harness_NOT_FOUND_MESSAGE
      "rpma-harness needs libibverbs and librdmacm (apt-get install libibverbs-dev librdmacm-dev)")
  return()
endif()

if(NOT TARGET rpma_harness::rpma)
  add_library(rpma_harness::rpma STATIC IMPORTED)
  set_target_properties(rpma_harness::rpma PROPERTIES
    IMPORTED_LOCATION "${_rpma_harness_lib}/librpma_harness.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "CXX"
    # -isystem, searched before /usr/include (Debian's librpma-dev has a
    # librpma.h of its own there).
    INTERFACE_INCLUDE_DIRECTORIES "${_rpma_harness_inc}"
    INTERFACE_LINK_LIBRARIES
      "${RPMA_HARNESS_IBVERBS_LIBRARY};${RPMA_HARNESS_RDMACM_LIBRARY};Threads::Threads;stdc++;m")

  add_library(rpma_harness::gtest_main STATIC IMPORTED)
  add_library(rpma_harness::testing STATIC IMPORTED)
  set_target_properties(rpma_harness::testing PROPERTIES
    IMPORTED_LOCATION "${_rpma_harness_lib}/librpma_harness_testing.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "CXX"
    INTERFACE_COMPILE_FEATURES "cxx_std_17")
  set_target_properties(rpma_harness::gtest_main PROPERTIES
    IMPORTED_LOCATION "${_rpma_harness_lib}/librpma_harness_gtest_main.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "CXX"
    INTERFACE_LINK_LIBRARIES "rpma_harness::testing")
  # GoogleTest's own package (libgtest-dev) when the consumer has not
  # found it already.
  if(NOT TARGET GTest::gmock)
    find_package(GTest QUIET)
  endif()
  if(TARGET GTest::gmock)
    set_property(TARGET rpma_harness::testing PROPERTY INTERFACE_LINK_LIBRARIES
      "rpma_harness::rpma;GTest::gmock;GTest::gtest")
  else()
    set_property(TARGET rpma_harness::testing PROPERTY INTERFACE_LINK_LIBRARIES
      "rpma_harness::rpma;gmock;gtest;Threads::Threads")
  endif()

  set(rpma_harness_HAS_DROPIN FALSE)
  if(EXISTS "${_rpma_harness_lib}/librpma.so.0")
    add_library(rpma_harness::librpma SHARED IMPORTED)
    set_target_properties(rpma_harness::librpma PROPERTIES
      IMPORTED_LOCATION "${_rpma_harness_lib}/librpma.so.0"
      IMPORTED_SONAME "librpma.so.0"
      INTERFACE_INCLUDE_DIRECTORIES "${_rpma_harness_inc}"
      # librpma.h's types and its users' ibv_* calls are libibverbs' (as
      # with Debian's librpma.pc: -lrpma -libverbs -lrdmacm).
      INTERFACE_LINK_LIBRARIES
        "${RPMA_HARNESS_IBVERBS_LIBRARY};${RPMA_HARNESS_RDMACM_LIBRARY}")
    set(rpma_harness_HAS_DROPIN TRUE)
  endif()
endif()

set(RPMA_HARNESS_SCENARIO "${_rpma_harness_prefix}/bin/rpma-harness-scenario")
