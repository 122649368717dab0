# The ctest fixture `rdma-vm-build` (issue 17): the Soft-RoCE VM runs its binaries under qemu TCG, which has
# no AVX-512, so the normal build's -march=native binaries die of SIGILL there. This script configures a
# second build directory with EPD_NATIVE=OFF (the compiler's baseline x86-64 ISA) and builds only the
# TARGETS the VM runs; the normal build keeps its native speed. Same compiler launcher, so ccache makes an
# unchanged rerun cost only the dependency checks.
#   cmake -DSOURCE_DIR=<repo> -DBUILD_DIR=<dir> -DCXX=<c++> [-DLAUNCHER=ccache] -DTARGETS=a,b [-DJOBS=2]
#         -P cmake/portable-build.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR BUILD_DIR CXX TARGETS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "portable-build: ${var} not set")
  endif()
endforeach()
if(NOT DEFINED JOBS)
  set(JOBS 2)
endif()
string(REPLACE "," ";" TARGETS "${TARGETS}")

set(configure_args -S ${SOURCE_DIR} -B ${BUILD_DIR} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEPD_NATIVE=OFF
                   -DCMAKE_CXX_COMPILER=${CXX})
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${configure_args} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable-build: configuring ${BUILD_DIR} with EPD_NATIVE=OFF failed")
endif()
execute_process(COMMAND nice -n 19 ${CMAKE_COMMAND} --build ${BUILD_DIR} -j${JOBS} --target ${TARGETS}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable-build: building ${TARGETS} in ${BUILD_DIR} failed (errors above)")
endif()
message(STATUS "portable-build: ${TARGETS} built in ${BUILD_DIR} without -march=native")
