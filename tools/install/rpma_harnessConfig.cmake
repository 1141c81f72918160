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
# Variables: RPMA_HARNESS_SCENARIO (the scenario runner),
# RPMA_HARNESS_LAUNCHER (server and clients as processes on one fake
# fabric), RPMA_HARNESS_FAKE_VERBS_DIR (the drop-in libibverbs.so.1 and
# librdmacm.so.1, if installed), rpma_harness_HAS_DROPIN.
# Function: rpma_harness_add_verbs_test (below): a verbs program, or a
# server and client pair, as a test on the fake NIC through the drop-in
# verbs libraries.

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

set(RPMA_HARNESS_LAUNCHER "${_rpma_harness_prefix}/bin/rpma-harness-launcher")
set(RPMA_HARNESS_FAKE_VERBS_DIR "")
if(EXISTS "${_rpma_harness_lib}/fake-verbs/libibverbs.so.1")
  set(RPMA_HARNESS_FAKE_VERBS_DIR "${_rpma_harness_lib}/fake-verbs")
endif()

# rpma_harness_add_verbs_test(NAME <name>
#     SERVER <program> [<arg>...]      # or the only program, without CLIENT
#     [CLIENT <program> [<arg>...]]    # a second process on the same fabric
#     [FAULTS <file>]                  # RPMA_HARNESS_FAULTS: the client's
#                                      #   (the program's, alone)
#     [CHECK <value>]                  # RPMA_HARNESS_CHECK, e.g. strict
#     [PERSONALITY spec|rxe|siw]       # RPMA_HARNESS_PERSONALITY
#     [EXPECT <label>=<0|code|nonzero|any>...]  # labels: server, client0
#     [READY listen|line:REGEX|delay:MS|none])  # when the client starts
#
# Runs programs built against libibverbs / librdmacm (not rpma-harness) on
# the fake NIC: LD_LIBRARY_PATH puts the drop-in libraries first. With a
# CLIENT, the launcher runs both as processes on one fresh fabric and the
# test passes when each ends as EXPECT says (default: exit 0); the client
# starts once the server listens (rdma_cm), unless READY says otherwise.
function(rpma_harness_add_verbs_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;FAULTS;CHECK;PERSONALITY;READY"
                        "SERVER;CLIENT;EXPECT")
  if(NOT arg_NAME OR NOT arg_SERVER)
    message(FATAL_ERROR "rpma_harness_add_verbs_test: NAME and SERVER are required")
  endif()
  if(NOT RPMA_HARNESS_FAKE_VERBS_DIR)
    message(FATAL_ERROR "rpma_harness_add_verbs_test: this install has no "
                        "drop-in verbs libraries (lib/fake-verbs)")
  endif()
  set(env "LD_LIBRARY_PATH=${RPMA_HARNESS_FAKE_VERBS_DIR}")
  if(arg_CHECK)
    list(APPEND env "RPMA_HARNESS_CHECK=${arg_CHECK}")
  endif()
  if(arg_PERSONALITY)
    list(APPEND env "RPMA_HARNESS_PERSONALITY=${arg_PERSONALITY}")
  endif()
  if(NOT arg_CLIENT)
    if(arg_FAULTS)
      list(APPEND env "RPMA_HARNESS_FAULTS=${arg_FAULTS}")
    endif()
    add_test(NAME ${arg_NAME} COMMAND ${arg_SERVER})
  else()
    set(launcher_args)
    if(arg_READY)
      list(APPEND launcher_args --ready "${arg_READY}")
    endif()
    if(arg_FAULTS)
      list(APPEND launcher_args --faults "client0=${arg_FAULTS}")
    endif()
    foreach(want IN LISTS arg_EXPECT)
      list(APPEND launcher_args --expect "${want}")
    endforeach()
    foreach(e IN LISTS env)
      list(APPEND launcher_args --env "${e}")
    endforeach()
    add_test(NAME ${arg_NAME}
             COMMAND "${RPMA_HARNESS_LAUNCHER}" ${launcher_args}
                     ${arg_SERVER} -- ${arg_CLIENT})
    # The launcher gives each process its environment; it runs natively.
    set(env "")
  endif()
  if(env)
    set_tests_properties(${arg_NAME} PROPERTIES ENVIRONMENT "${env}")
  endif()
endfunction()
