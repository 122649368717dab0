# The ctest checks `fuzz-build` and `fuzz-<target>` (fuzz/README.md): the libFuzzer targets of fuzz/ build
# with clang, each survives a short coverage-guided run under ASan+UBSan from its seed corpus, and every crash
# reproducer kept in fuzz/regressions/<target> still passes.
#
# Build (configures fuzz/ in BUILD_DIR with clang++, then builds every target JOBS at a time):
#   cmake -DSOURCE_DIR=<repo> -DBUILD_DIR=<dir> -DLLAMA_CPP_SRC=<ggml headers' tree> -DGGML_DIR=<ggml libraries>
#         [-DLAUNCHER=ccache] [-DJOBS=2] -P cmake/fuzz-check.cmake
# Run one target for SECONDS (new inputs go to a scratch corpus under BUILD_DIR/run/<target>; the repository's
# corpus is only read), then replay its regressions:
#   cmake -DSOURCE_DIR=<repo> -DBUILD_DIR=<dir> -DTARGET=codec [-DSECONDS=8] -P cmake/fuzz-check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR BUILD_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "fuzz-check: ${var} not set")
  endif()
endforeach()

if(NOT DEFINED TARGET)
  if(NOT DEFINED JOBS)
    set(JOBS 2)
  endif()
  # A missing clang fails the suite (never a skip): the fuzz targets are part of the tests.
  find_program(CLANGXX NAMES clang++ clang++-14)
  if(NOT CLANGXX)
    message(FATAL_ERROR "fuzz-check: clang++ not found: install the Debian packages clang and libclang-rt-14-dev "
                        "(scripts/setup-deps does)")
  endif()
  set(configure_args -S ${SOURCE_DIR}/fuzz -B ${BUILD_DIR} -DCMAKE_CXX_COMPILER=${CLANGXX}
                     -DEPD_LLAMA_CPP_SRC=${LLAMA_CPP_SRC} -DEPD_GGML_DIR=${GGML_DIR})
  if(LAUNCHER)
    list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} ${configure_args} RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz-check: configuring fuzz/ with ${CLANGXX} failed (libFuzzer needs libclang-rt-14-dev)")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} -j${JOBS} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz-check: building the fuzz targets failed (errors above)")
  endif()
  message(STATUS "fuzz-check: fuzz targets built in ${BUILD_DIR}")
  return()
endif()

if(NOT DEFINED SECONDS)
  set(SECONDS 8)
endif()
set(binary ${BUILD_DIR}/fuzz_${TARGET})
if(NOT EXISTS ${binary})
  message(FATAL_ERROR "fuzz-check: ${binary} does not exist: the fuzz-build test builds it (did it fail?)")
endif()
set(corpus ${SOURCE_DIR}/fuzz/corpus/${TARGET})
set(run ${BUILD_DIR}/run/${TARGET})
file(REMOVE_RECURSE ${run})
file(MAKE_DIRECTORY ${run}/corpus)
# The scratch corpus comes first: libFuzzer writes new inputs only into its first directory.
execute_process(COMMAND ${binary} -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                        -artifact_prefix=${run}/ ${run}/corpus ${corpus}
                WORKING_DIRECTORY ${run} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
file(WRITE ${run}/fuzz.log "${out}")
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" execs "${out}")
if(NOT rc EQUAL 0)
  file(GLOB artifacts ${run}/crash-* ${run}/leak-* ${run}/timeout-* ${run}/oom-*)
  message(FATAL_ERROR "${out}\nfuzz-check: fuzz_${TARGET} failed (rc ${rc}); the input: ${artifacts}\n"
                      "Fix the cause, then keep the input in fuzz/regressions/${TARGET}/ (fuzz/README.md)")
endif()
message(STATUS "fuzz-check: fuzz_${TARGET} ran ${SECONDS} s, ${execs}")

file(GLOB regressions ${SOURCE_DIR}/fuzz/regressions/${TARGET}/*)
list(FILTER regressions EXCLUDE REGEX "/README")
if(regressions)
  execute_process(COMMAND ${binary} -rss_limit_mb=2048 -timeout=10 ${regressions} WORKING_DIRECTORY ${run}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${out}\nfuzz-check: a reproducer in fuzz/regressions/${TARGET} fails again")
  endif()
  list(LENGTH regressions n)
  message(STATUS "fuzz-check: ${n} reproducers of fuzz/regressions/${TARGET} pass")
endif()
